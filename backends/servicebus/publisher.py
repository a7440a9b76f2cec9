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
from collections.abc import Sequence

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient, ServiceBusSender
from azure.servicebus.exceptions import (
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    ServiceBusError,
)

from broker import OutboundMessage
from broker.backends.servicebus.admin import EntityAdmin
from broker.backends.servicebus.connection import Shutdowns, close_quietly, make_client
from broker.backends.servicebus.errors import translate
from broker.backends.servicebus.mapping import to_sdk
from broker.backends.servicebus.settings import ServiceBusSettings
from broker.driver.publishing import ClosingDriver, DriverPublisher
from broker.errors import MessageTooLarge, PublishError, Timeout

__all__ = ["ServiceBusPublishDriver", "ServiceBusPublisher"]


def _remaining(deadline: float | None) -> float | None:
    if deadline is None:
        return None
    left = deadline - time.monotonic()
    if left <= 0:
        raise Timeout("publishing did not finish within its timeout")
    return left


class _Link:
    """The sending link to one queue or topic (Service Bus sends to both the same way)."""

    __slots__ = ("_opening", "_publisher", "_sender", "_sending", "name")

    def __init__(self, publisher: ServiceBusPublishDriver, name: str) -> None:
        self._publisher = publisher
        self.name = name
        self._sender: ServiceBusSender | None = None
        self._opening: asyncio.Lock | None = None
        # One send at a time per link: the SDK's concurrent sends on one link can put transfers on
        # the wire out of delivery-id order, which the broker rejects by closing the connection.
        self._sending = asyncio.Lock()

    def __repr__(self) -> str:
        return f"<ServiceBus link {self.name!r}>"

    async def _open(self, timeout: float | None) -> ServiceBusSender:
        sender = self._sender
        if sender is not None:
            return sender
        if self._opening is None:
            self._opening = asyncio.Lock()
        async with self._opening:
            if self._sender is None:
                deadline = None if timeout is None else time.monotonic() + timeout
                admin = self._publisher._admin
                if admin is not None and admin.verify:
                    async with asyncio.timeout(_remaining(deadline)):
                        await admin.verify_sender(self.name)
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

    async def send_one(self, message: OutboundMessage, timeout: float | None) -> None:
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

    async def send_many(self, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
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
        originals: Sequence[OutboundMessage],
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


class ServiceBusPublishDriver(ClosingDriver):
    """Sends through one SDK client; a sender per queue or topic, opened on first use."""

    def __init__(
        self, settings: ServiceBusSettings, shutdowns: Shutdowns, admin: EntityAdmin | None = None
    ) -> None:
        self._settings = settings
        self._admin = admin
        self._key_to = settings.key_to
        self._id_attribute = settings.message_id_attribute
        self._shutdowns = shutdowns
        self._sdk_client: ServiceBusClient | None = None
        self._links: dict[str, _Link] = {}
        self._senders: list[ServiceBusSender] = []

    def __repr__(self) -> str:
        return f"<ServiceBusPublishDriver links={sorted(self._links)}>"

    def _client(self) -> ServiceBusClient:
        if self._sdk_client is None:
            self._sdk_client = make_client(self._settings)
        return self._sdk_client

    def check_topic(self, name: str) -> None:
        """Any non-empty name (a queue, or a topic made on first publish where allowed)."""

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """One message: sent as it is; more: in size-bounded batches, all filled before any is sent."""
        self._check_open(topic)
        link = self._links.get(topic)
        if link is None:
            link = self._links[topic] = _Link(self, topic)
        if len(messages) == 1:
            await link.send_one(messages[0], timeout)
        else:
            await link.send_many(messages, timeout)

    async def close(self) -> None:
        """Close the links; later sends raise ClosedError. Idempotent.

        The SDK senders and connection finish closing in the background (the backend waits for them).
        """
        if not self._start_closing():
            return
        senders, self._senders = self._senders, []
        client, self._sdk_client = self._sdk_client, None
        if senders or client is not None:
            self._shutdowns.start(self._shutdown(senders, client))

    @staticmethod
    async def _shutdown(senders: list[ServiceBusSender], client: ServiceBusClient | None) -> None:
        await asyncio.gather(*(close_quietly(s, "a sender") for s in senders))
        await close_quietly(client, "the publisher's client")


class ServiceBusPublisher(DriverPublisher):
    """A Publisher: topic handles on the backend's one SDK client and its senders, shared by the
    backend's publishers (``close()`` waits for this publisher's sends and leaves the client open;
    the backend's ``close()`` closes it)."""

    def __init__(self, driver: ServiceBusPublishDriver) -> None:
        super().__init__(driver, shared=True)
