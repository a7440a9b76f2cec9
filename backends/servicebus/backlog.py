"""The backlog of a Service Bus queue or subscription (:class:`broker.backend.Backlog`).

The management API's runtime properties carry ``active_message_count``: the messages of the
entity in the active state (Azure's definition; scheduled and dead-lettered ones are apart). It
is asked through the same ``ServiceBusAdministrationClient`` set-up as entity creation
(:class:`broker.backends.servicebus.admin.EntityAdmin`: its endpoint and credentials). Where the
management API gives no counts (an emulator that leaves out ``CountDetails``) or cannot be used
(a token credential object), the backlog is None.
"""

from __future__ import annotations

import asyncio
from typing import Any

from azure.core.exceptions import ResourceNotFoundError

from broker.backends.servicebus.admin import EntityAdmin
from broker.backends.servicebus.errors import translate
from broker.errors import UnknownTopic

__all__ = ["BacklogReader"]


class BacklogReader:
    """Reads ``active_message_count`` of queues and subscriptions; one management client, lazily."""

    def __init__(self, admin: EntityAdmin) -> None:
        self._admin = admin
        self._client: Any = None
        self._usable = True
        self._lock = asyncio.Lock()

    async def backlog(self, topic: str, subscription: str | None) -> int | None:
        """Active messages of queue ``topic`` (``subscription`` None) or of a topic's subscription."""
        async with self._lock:  # the sync client is used from one thread at a time
            if not self._usable:
                return None
            if self._client is None:
                self._client = self._admin._make_client()
                if self._client is None:  # a token credential object: no management client
                    self._usable = False
                    return None
            client = self._client
            if subscription is None:
                what = f"queue {topic!r}"
                call: Any = lambda: client.get_queue_runtime_properties(topic)  # noqa: E731
            else:
                what = f"subscription {subscription!r} of topic {topic!r}"
                call = lambda: client.get_subscription_runtime_properties(topic, subscription)  # noqa: E731
            try:
                properties = await asyncio.to_thread(call)
            except ResourceNotFoundError as exc:
                raise UnknownTopic(f"Service Bus has no {what}") from exc
            except Exception as exc:
                raise translate(exc, f"reading the runtime properties of {what}") from exc
        try:
            count = properties.active_message_count
        except AttributeError:  # no CountDetails in the answer
            return None
        return None if count is None else int(count)

    async def close(self) -> None:
        """Release the management client (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)
