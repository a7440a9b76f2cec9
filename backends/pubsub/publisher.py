"""Publishing through the SDK's batching client, awaited from asyncio.

``Topic.publish`` returns once the server assigned the message id. ``Topic.batch_publish``
hands every message to the client's own batcher (one request per batch threshold, per
ordering key) and waits once for all of them: SDK threads count completions and wake the
event loop only per chunk, never per message.

Flow control is done here, asynchronously (the SDK's blocking flow control would block the
event loop): at most ``publish_max_outstanding_messages`` / ``_bytes`` are handed to the client
and not yet confirmed; publishing beyond waits without blocking the loop.

With ``message_ordering`` on, a message's ``key`` becomes its ordering key; otherwise the key
travels as the ``polybroker-key`` attribute (see :mod:`broker.backends.pubsub.mapping`). When a publish
with an ordering key fails, the SDK pauses that key; the error is raised and the key resumed, so
a retry by the caller goes through.

Attributes named ``topic``, ``data``, ``ordering_key``, ``retry`` or ``timeout`` collide with the
client's keyword arguments; such messages are published with a direct Publish RPC instead of the
batcher (with ordering on, they may overtake messages of the same key published just before).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections import deque
from collections.abc import Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.api_core.retry import Retry, if_exception_type
from google.cloud import pubsub_v1  # type: ignore[import-untyped]
from google.pubsub_v1.types import PubsubMessage

from broker import OutboundMessage
from broker.backends.pubsub.admin import Admin
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.errors import translate
from broker.backends.pubsub.futures import CompletionGroup, post
from broker.backends.pubsub.mapping import (
    RESERVED_ATTRIBUTE_NAMES,
    check_reserved,
    ordering_key,
    outbound_size,
    wire_attributes,
)
from broker.backends.pubsub.settings import MAX_MESSAGE_BYTES, PubsubSettings
from broker.driver.forwarding import Forwarded
from broker.driver.publishing import ClosingDriver, DriverPublisher
from broker.errors import MessageTooLarge, PublishError, Timeout

__all__ = ["PubsubPublishDriver", "PubsubPublisher"]

log = logging.getLogger("broker.backends.pubsub")

#: Publish errors the client retries (as its own default), until ``publish_timeout``.
_TRANSIENT = (
    api_exceptions.Aborted,
    api_exceptions.Cancelled,
    api_exceptions.DeadlineExceeded,
    api_exceptions.InternalServerError,
    api_exceptions.ResourceExhausted,
    api_exceptions.ServiceUnavailable,
    api_exceptions.Unknown,
)
#: Messages one direct Publish RPC carries at most (the server's limit).
_DIRECT_BATCH = 1000


class _Outstanding:
    """Asynchronous flow control: messages and bytes handed to the client and not yet confirmed.

    Used on the event loop thread only. A request larger than the limits is admitted when
    nothing else is outstanding, so it cannot wait forever.
    """

    def __init__(self, max_messages: int, max_bytes: int) -> None:
        self.max_messages = max_messages
        self.max_bytes = max_bytes
        self.messages = 0
        self.bytes = 0
        self._waiters: deque[asyncio.Future[None]] = deque()

    def _fits(self, count: int, size: int) -> bool:
        return self.messages == 0 or (
            self.messages + count <= self.max_messages and self.bytes + size <= self.max_bytes
        )

    async def acquire(self, count: int, size: int) -> None:
        """Wait until ``count`` messages of ``size`` bytes fit, then count them."""
        while not self._fits(count, size):
            waiter: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            finally:
                with contextlib.suppress(ValueError):
                    self._waiters.remove(waiter)
        self.messages += count
        self.bytes += size

    def release(self, count: int, size: int) -> None:
        """``count`` messages of ``size`` bytes were confirmed (or failed)."""
        self.messages -= count
        self.bytes -= size
        waiters, self._waiters = self._waiters, deque()
        for waiter in waiters:
            if not waiter.done():
                waiter.set_result(None)

    async def drained(self, timeout: float) -> bool:
        """Wait (up to ``timeout`` seconds) until nothing is outstanding; False on timeout."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while self.messages > 0:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            waiter: asyncio.Future[None] = loop.create_future()
            self._waiters.append(waiter)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(waiter, remaining)
        return True


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a future's exception as seen (it was reported through another future)."""
    if not future.cancelled():
        future.exception()


class PubsubPublishDriver(ClosingDriver):
    """Publishes through one ``pubsub_v1.PublisherClient`` (made on first publish)."""

    def __init__(self, clients: Clients, admin: Admin, settings: PubsubSettings) -> None:
        self._clients = clients
        self._admin = admin
        self._settings = settings
        #: Whether ordering keys are published (``message_ordering``).
        self.ordering = settings.message_ordering
        self._client: Any = None
        #: Full topic paths by the name given, and the topics known to exist (or not created here).
        self._paths: dict[str, str] = {}
        self._ready: set[str] = set()
        self._flow = _Outstanding(
            settings.publish_max_outstanding_messages, settings.publish_max_outstanding_bytes
        )

    def __repr__(self) -> str:
        return f"<PubsubPublishDriver {self._settings.project} {'closed' if self._closed else 'open'}>"

    def check_topic(self, name: str) -> None:
        """A short topic id or ``projects/P/topics/T`` (made into its full path here)."""
        self._paths[name] = self._clients.topic_path(name)

    def path(self, name: str) -> str:
        """The full topic name, ``projects/P/topics/T``."""
        path = self._paths.get(name)
        if path is None:
            path = self._paths[name] = self._clients.topic_path(name)
        return path

    async def _prepare(self, name: str) -> None:
        if self._settings.create_missing or self._settings.provision == "verify":
            await self._admin.ensure_topic(name)  # verify: a ProvisioningError names a missing one
        self._ready.add(name)

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Publish with the client's batching; return once Pub/Sub assigned every message an id.

        Every message's size is checked before any is published. The first failure is raised (the
        messages the server already accepted stay published).
        """
        self._check_open(topic)
        sizes: list[int] = []
        for message in messages:
            check_reserved(message)
            size = outbound_size(message)
            if size > MAX_MESSAGE_BYTES:
                raise MessageTooLarge(
                    f"a {size}-byte message is larger than Pub/Sub's limit of {MAX_MESSAGE_BYTES} bytes"
                )
            sizes.append(size)
        path = self.path(topic)
        try:
            async with asyncio.timeout(timeout):
                if topic not in self._ready:
                    await self._prepare(topic)
                if len(messages) == 1:
                    await self._publish_one(path, messages[0], sizes[0])
                else:
                    await self._publish_many(path, messages, sizes)
        except TimeoutError as exc:
            if isinstance(exc, Timeout):
                raise
            what = "publishing" if len(messages) == 1 else f"publishing {len(messages)} messages"
            raise Timeout(f"{what} to {path} took longer than {timeout}s") from exc

    @property
    def client(self) -> Any:
        """The SDK's ``pubsub_v1.PublisherClient`` (an escape hatch)."""
        if self._client is None:
            settings = self._settings
            batch = pubsub_v1.types.BatchSettings(
                max_bytes=settings.publish_byte_threshold,
                max_latency=settings.publish_delay_threshold,
                max_messages=settings.publish_count_threshold,
            )
            options = pubsub_v1.types.PublisherOptions(
                enable_message_ordering=settings.message_ordering,
                flow_control=pubsub_v1.types.PublishFlowControl(
                    limit_exceeded_behavior=pubsub_v1.types.LimitExceededBehavior.IGNORE
                ),
                retry=Retry(
                    initial=0.1,
                    maximum=60.0,
                    multiplier=4,
                    predicate=if_exception_type(*_TRANSIENT),
                    timeout=settings.publish_timeout,
                ),
                timeout=settings.publish_timeout,
            )
            self._client = self._clients.publisher(batch, options)
        return self._client

    # -- publishing -----------------------------------------------------------------------
    def _submit(self, path: str, message: OutboundMessage) -> Any:
        """Hand ``message`` to the client's batcher; its SDK future."""
        data = message.data if type(message.data) is bytes else bytes(message.data)
        key = message.key
        ordering = self.ordering
        try:
            if message.attributes or not data or (key is not None and not (ordering and key)):
                return self.client.publish(
                    path, data, ordering_key(message, ordering), **wire_attributes(message, ordering)
                )
            return self.client.publish(path, data, key or "")
        except Exception as exc:
            raise translate(exc, f"publishing to {path}", PublishError) from exc

    def _resume(self, path: str, messages: Sequence[OutboundMessage]) -> None:
        """Resume the ordering keys of ``messages`` after a failure (the SDK paused them)."""
        if not self.ordering or self._client is None:
            return
        for key in {m.key for m in messages if m.key}:
            with contextlib.suppress(Exception):
                self._client.resume_publish(path, key)

    async def _publish_one(self, path: str, message: OutboundMessage, size: int) -> None:
        if message.attributes and not RESERVED_ATTRIBUTE_NAMES.isdisjoint(message.attributes):
            await self._publish_direct(path, [message], size)
            return
        flow = self._flow
        await flow.acquire(1, size)
        loop = asyncio.get_running_loop()
        try:
            self._check_open(path)
            sdk_future = self._submit(path, message)
        except BaseException:
            flow.release(1, size)
            raise
        result: asyncio.Future[str] = loop.create_future()

        def settle(done: Any) -> None:  # on the loop
            flow.release(1, size)
            if result.done():
                return
            error = done.exception()
            if error is None:
                result.set_result(done.result())
            else:
                result.set_exception(error)

        sdk_future.add_done_callback(lambda done: post(loop, settle, done))
        try:
            await result
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._resume(path, [message])
            raise translate(exc, f"publishing to {path}", PublishError) from exc

    async def _publish_many(
        self, path: str, messages: Sequence[OutboundMessage], sizes: Sequence[int]
    ) -> None:
        direct = [
            i
            for i, m in enumerate(messages)
            if m.attributes and not RESERVED_ATTRIBUTE_NAMES.isdisjoint(m.attributes)
        ]
        if direct:
            chosen = set(direct)
            batched = [m for i, m in enumerate(messages) if i not in chosen]
            batched_sizes = [s for i, s in enumerate(sizes) if i not in chosen]
            await asyncio.gather(
                self._publish_direct(path, [messages[i] for i in direct], sum(sizes[i] for i in direct)),
                self._publish_many(path, batched, batched_sizes),
            )
            return
        loop = asyncio.get_running_loop()
        flow = self._flow
        chunk = max(1, min(len(messages), flow.max_messages // 4))
        groups: list[CompletionGroup] = []
        try:
            for start in range(0, len(messages), chunk):
                part = messages[start : start + chunk]
                part_bytes = sum(sizes[start : start + chunk])
                await flow.acquire(len(part), part_bytes)
                group = CompletionGroup(loop, functools.partial(flow.release, len(part), part_bytes))
                group.future.add_done_callback(_retrieve)
                groups.append(group)
                try:
                    self._check_open(path)
                    for message in part:
                        group.add(self._submit(path, message))
                finally:
                    group.seal()  # releases the chunk's capacity once all it holds are done
                if groups[0].failed or group.failed:
                    break
                await asyncio.sleep(0)  # let the loop breathe between chunks of a large batch
            for group in groups:
                await group.future
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._resume(path, messages)
            raise translate(exc, f"publishing to {path}", PublishError) from exc

    async def _publish_direct(self, path: str, messages: Sequence[OutboundMessage], size: int) -> None:
        """Publish with Publish RPCs of up to 1000 messages each, bypassing the batcher."""
        await self._flow.acquire(len(messages), size)
        try:
            self._check_open(path)
            client = self._clients.admin_publisher()
            for start in range(0, len(messages), _DIRECT_BATCH):
                request = [
                    PubsubMessage(
                        data=bytes(m.data),
                        attributes=dict(wire_attributes(m, self.ordering)),
                        ordering_key=ordering_key(m, self.ordering),
                    )
                    for m in messages[start : start + _DIRECT_BATCH]
                ]
                await client.publish(topic=path, messages=request, timeout=self._settings.publish_timeout)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            raise translate(exc, f"publishing to {path}", PublishError) from exc
        finally:
            self._flow.release(len(messages), size)

    # -- closing --------------------------------------------------------------------------
    async def close(self) -> None:
        """Send what is batched, wait (up to ``close_timeout``) for it, close the channel. Idempotent."""
        if not self._start_closing():
            return
        client, self._client = self._client, None
        if client is None:
            return
        with contextlib.suppress(RuntimeError):  # already stopped
            client.stop()
        if not await self._flow.drained(self._settings.close_timeout):
            log.warning(
                "closing the publisher with %d messages unconfirmed after %ss",
                self._flow.messages,
                self._settings.close_timeout,
            )
        with contextlib.suppress(Exception):
            client.transport.close()


class PubsubPublisher(DriverPublisher):
    """A Publisher on the backend's one ``pubsub_v1.PublisherClient`` (``broker.driver.publishing`` over its
    driver, shared by the backend's publishers: ``close()`` waits for this publisher's sends, up to
    ``close_timeout``, and leaves the client open; the backend's ``close()`` closes it)."""

    def __init__(self, driver: PubsubPublishDriver, close_timeout: float) -> None:
        self._pubsub = driver
        super().__init__(driver, shared=True, close_timeout=close_timeout)

    ordering: Forwarded[bool] = Forwarded(
        "_pubsub", "Whether ordering keys are published (``message_ordering``)."
    )

    client: Forwarded[Any] = Forwarded(
        "_pubsub", "The SDK's ``pubsub_v1.PublisherClient`` (an escape hatch)."
    )

    def path(self, name: str) -> str:
        """The full name of topic ``name``, ``projects/P/topics/T``."""
        return self._pubsub.path(name)
