"""Publishing to Service Bus queues and topics.

One SDK client (one AMQP connection) per publisher, one SDK sender per queue or topic, opened on
first use. ``batch_publish`` fills size-bounded ``ServiceBusMessageBatch`` objects (the link's
limit), starting a new one whenever the next message no longer fits, then sends them in order; a
single message larger than an empty batch holds raises :class:`~broker.errors.MessageTooLarge`
before anything is sent.
"""

from __future__ import annotations

import asyncio
import time
from types import TracebackType
from typing import Self

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusError,
)

from backends.servicebus.admin import EntityAdmin
from backends.servicebus.connection import Shutdowns, close_quietly, make_client
from backends.servicebus.errors import translate
from backends.servicebus.mapping import to_sdk
from backends.servicebus.settings import ServiceBusSettings
from broker.errors import ClosedError, MessageTooLarge, PublishError, Timeout
from broker.message import OutboundMessage

__all__ = ["ServiceBusPublisher", "ServiceBusTopic"]


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("publishing did not finish within its timeout")
    return left


class ServiceBusTopic:
    """A queue or topic to publish to (Service Bus sends to both the same way)."""

    __slots__ = ("_opening", "_publisher", "_sender", "_sending", "name")

    def __init__(self, publisher: ServiceBusPublisher, name: str) -> None:
        self._publisher = publisher
        self.name = name
        self._sender: ServiceBusSender | None = None
        self._opening: asyncio.Lock | None = None
        # One send at a time per link: the SDK's concurrent sends on one link can put transfers on
        # the wire out of delivery-id order, which the broker rejects by closing the connection.
        self._sending = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<ServiceBusTopic {self.name!r}>"

    async def _open(self, timeout: float | None) -> ServiceBusSender:
        sender = self._sender
        if sender is not None:
            return sender
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._sender is None:
                deadline = None if timeout is None else time.monotonic() + timeout
                try:
                    sender = await self._open_sender(deadline)
                except MessagingEntityNotFoundError as exc:
                    admin = self._publisher._admin
                    if admin is None or not admin.enabled:
                        raise translate(exc, f"cannot open a sender for {self.name!r}", PublishError) from exc
                    # Nothing of that name: create it as a topic (consumers subscribe to it), retry once.
                    async with asyncio.timeout(_remaining(deadline)):
                        await admin.ensure_topic(self.name)
                    try:
                        sender = await self._open_sender(deadline)
                    except MessagingEntityNotFoundError as again:
                        what = f"cannot open a sender for {self.name!r}"
                        raise translate(again, what, PublishError) from again
                self._sender = sender
                self._publisher._senders.append(sender)
            return self._sender

    async def _open_sender(self, deadline: float | None) -> ServiceBusSender:
        """A new, opened SDK sender; ``MessagingEntityNotFoundError`` passes through untranslated."""
        self._publisher._check_open(self.name)
        sender = self._publisher._client().get_queue_sender(self.name)
        try:
            async with asyncio.timeout(_remaining(deadline)):
                await sender.__aenter__()
        except BaseException as exc:
            await close_quietly(sender, f"sender for {self.name!r}")
            if isinstance(exc, MessagingEntityNotFoundError):
                raise
            if isinstance(exc, ServiceBusError | TimeoutError):
                raise translate(exc, f"cannot open a sender for {self.name!r}", PublishError) from exc
            raise
        return sender

    async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        """Send one message; returns once Service Bus has accepted it."""
        publisher = self._publisher
        publisher._check_open(self.name)
        outgoing = to_sdk(message, publisher._key_to, publisher._id_attribute)
        deadline = None if timeout is None else time.monotonic() + timeout
        sender = self._sender or await self._open(timeout)
        try:
            async with self._sending:
                publisher._check_open(self.name)
                await sender.send_messages(outgoing, timeout=_remaining(deadline))
        except MessageSizeExceededError as exc:
            raise MessageTooLarge(
                f"a message of {len(message.data)} bytes is larger than {self.name!r} accepts: {exc}"
            ) from exc
        except ServiceBusError as exc:
            raise translate(exc, f"publishing to {self.name!r} failed", PublishError) from exc

    async def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        """Send all messages in as few size-bounded batches as fit, in order."""
        publisher = self._publisher
        publisher._check_open(self.name)
        # every message is checked before any is sent
        key_to, id_attribute = publisher._key_to, publisher._id_attribute
        outgoing = [to_sdk(m, key_to, id_attribute) for m in messages]
        if not outgoing:
            return
        deadline = None if timeout is None else time.monotonic() + timeout
        sender = self._sender or await self._open(timeout)
        try:
            async with self._sending:
                await self._send_batches(sender, outgoing, messages, deadline)
        except MessageTooLarge:
            raise
        except ServiceBusError as exc:
            raise translate(exc, f"publishing to {self.name!r} failed", PublishError) from exc

    async def _send_batches(
        self,
        sender: ServiceBusSender,
        outgoing: list[ServiceBusMessage],
        originals: tuple[OutboundMessage, ...],
        deadline: float | None,
    ) -> None:
        # Fill every batch before sending any, so that a message too large for any batch fails
        # the call before anything of it reached the broker.
        batch = await sender.create_message_batch()
        batches = [batch]
        for index, message in enumerate(outgoing):
            try:
                batch.add_message(message)
                continue
            except MessageSizeExceededError as exc:
                if len(batch) == 0:
                    raise self._too_large(originals[index], batch.max_size_in_bytes) from exc
            batch = await sender.create_message_batch()
            batches.append(batch)
            try:
                batch.add_message(message)
            except MessageSizeExceededError as exc:
                raise self._too_large(originals[index], batch.max_size_in_bytes) from exc
        for batch in batches:
            self._publisher._check_open(self.name)
            await sender.send_messages(batch, timeout=_remaining(deadline))

    def _too_large(self, message: OutboundMessage, limit: int) -> MessageTooLarge:
        return MessageTooLarge(
            f"a message of {len(message.data)} bytes does not fit in a batch for {self.name!r} "
            f"(at most {limit} bytes, encoded)"
        )


class ServiceBusPublisher:
    """A Publisher: topic handles sharing one SDK client."""

    def __init__(
        self, settings: ServiceBusSettings, shutdowns: Shutdowns, admin: EntityAdmin | None = None
    ) -> None:
        self._settings = settings
        self._admin = admin
        self._key_to = settings.key_to
        self._id_attribute = settings.message_id_attribute
        self._shutdowns = shutdowns
        self._sdk_client: ServiceBusClient | None = None
        self._topics: dict[str, ServiceBusTopic] = {}
        self._senders: list[ServiceBusSender] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"<ServiceBusPublisher topics={sorted(self._topics)}>"

    def _check_open(self, name: str) -> None:
        if self._closed:
            raise ClosedError(f"cannot publish to {name!r}: the publisher is closed")

    def _client(self) -> ServiceBusClient:
        if self._sdk_client is None:
            self._sdk_client = make_client(self._settings)
        return self._sdk_client

    def topic(self, name: str) -> ServiceBusTopic:
        """The handle for queue or topic ``name`` (its sender opens on first publish)."""
        if self._closed:
            raise ClosedError("the publisher is closed")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a topic name must be a non-empty string, got {name!r}")
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = ServiceBusTopic(self, name)
        return topic

    async def close(self) -> None:
        """Close the publisher; later publishes raise ClosedError. Idempotent.

        The SDK senders and connection finish closing in the background (the backend waits for them).
        """
        if self._closed:
            return
        self._closed = True
        senders, self._senders = self._senders, []
        client, self._sdk_client = self._sdk_client, None
        if senders or client is not None:
            self._shutdowns.start(self._shutdown(senders, client))

    @staticmethod
    async def _shutdown(senders: list[ServiceBusSender], client: ServiceBusClient | None) -> None:
        await asyncio.gather(*(close_quietly(s, "a sender") for s in senders))
        await close_quietly(client, "the publisher's client")

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()
