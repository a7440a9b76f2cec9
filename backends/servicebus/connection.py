"""Building SDK clients from the settings, and finishing SDK shutdowns in the background.

Each publisher and each consumer gets its own ``ServiceBusClient`` (its own AMQP connection), so
one that breaks or is torn down mid-operation cannot disturb another.

Closing an SDK receiver or sender waits for its keep-alive loop, which sleeps in one-second steps.
So that ``close()`` of a consumer or publisher returns at once, that wait runs in a
:class:`Shutdowns` task the backend awaits (bounded) when it closes.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable
from typing import Any

from azure.core.credentials import AzureNamedKeyCredential, AzureSasCredential
from azure.servicebus import TransportType
from azure.servicebus.aio import ServiceBusClient

from broker.backends.servicebus.settings import ServiceBusSettings

__all__ = ["Shutdowns", "close_quietly", "make_client"]

log = logging.getLogger("broker.backends.servicebus")

#: Seconds any single SDK close may take before it is abandoned.
CLOSE_TIMEOUT = 5.0


def make_client(settings: ServiceBusSettings) -> ServiceBusClient:
    """An (unopened) aio ``ServiceBusClient`` for ``settings``."""
    options: dict[str, Any] = {"retry_total": settings.retry_total}
    if settings.tls_ca_file is not None:
        options["connection_verify"] = settings.tls_ca_file
    if settings.custom_endpoint_address is not None:
        options["custom_endpoint_address"] = settings.custom_endpoint_address
        options["transport_type"] = TransportType.Amqp  # the SDK would switch to websockets
    if settings.connection_string is not None:
        return ServiceBusClient.from_connection_string(settings.connection_string, **options)
    namespace = settings.fully_qualified_namespace
    assert namespace is not None  # the settings check it
    credential: Any
    if settings.shared_access_key_name is not None and settings.shared_access_key is not None:
        credential = AzureNamedKeyCredential(settings.shared_access_key_name, settings.shared_access_key)
    elif settings.sas_token is not None:
        credential = AzureSasCredential(settings.sas_token)
    else:
        credential = settings.credential
    if not settings.use_tls:
        options["use_tls"] = False
    return ServiceBusClient(namespace, credential, **options)


async def close_quietly(resource: Any, what: str) -> None:
    """``await resource.close()``, bounded by ``CLOSE_TIMEOUT``; failures are logged, never raised."""
    if resource is None:
        return
    try:
        async with asyncio.timeout(CLOSE_TIMEOUT):
            await resource.close()
    except asyncio.CancelledError:
        raise
    except Exception as exc:  # the resource is gone either way
        log.debug("closing %s failed: %r", what, exc)


class Shutdowns:
    """Background SDK shutdowns of one backend; :meth:`wait` finishes them."""

    def __init__(self) -> None:
        self._tasks: set[asyncio.Task[None]] = set()

    def start(self, shutdown: Awaitable[None]) -> None:
        """Run ``shutdown`` in the background (at once if no event loop runs)."""
        task = asyncio.ensure_future(shutdown)
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            log.debug("a background shutdown failed: %r", task.exception())

    async def wait(self, timeout: float = 2 * CLOSE_TIMEOUT) -> None:
        """Wait for every shutdown started so far (cancelling what is left after ``timeout``)."""
        while self._tasks:
            tasks = list(self._tasks)
            _, pending = await asyncio.wait(tasks, timeout=timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)  # their errors are logged by _done; our cancellation is not eaten
                return
