"""Consuming from RabbitMQ: a subscription is a durable quorum queue bound to the topic's exchange.

The iterators are the portable shells of :mod:`broker.driver.pushed` over :class:`RabbitmqSubscription`,
the push driver: entered (or on its first ``next_message``) it declares the exchange, the queue
``<topic>.<subscription>`` and the binding, so every message published afterwards reaches it; then
it consumes on its own channel with ``basic.qos`` prefetch. Several iterators on one subscription
share its queue: competing consumers.

:class:`RabbitmqAcker` settles deliveries. What RabbitMQ has no native form for is emulated here:

* ``nack(delay)``: the message is held, unsettled, for ``delay`` seconds and then returned with
  ``basic.nack(requeue=True)`` (it keeps its prefetch slot meanwhile; if the consumer closes or
  dies first, the broker returns it at once);
* ``ack_deadline``: a client-side timer per handed-out message returns it to the queue when it
  expires; ``in_progress()`` restarts the timer. A consumer that dies loses its channel, and the
  broker returns its unsettled messages at once.

After a lost connection (also a server that died) aio-pika reopens the channel and consumes again
once the broker is back; deliveries of the old channel not yet handed out are dropped, never handed
out (nothing can settle them; the broker requeues them), so meanwhile ``next_message`` raises
``Timeout``.

Closing a consumer closes its channel: the broker returns every message it held (delivered but
not handed out, or handed out and unsettled). Settling such a message afterwards raises ``AckError``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractIncomingMessage
from aio_pika.exceptions import ChannelInvalidStateError

from broker import Message
from broker.backends.rabbitmq.mapping import (
    close_quietly,
    declare_exchange,
    native_properties,
    to_message,
    translate,
)
from broker.backends.rabbitmq.provisioning import Entity, missing_entities
from broker.backends.rabbitmq.settings import ConsumerOptions, check_name, queue_name
from broker.driver.acking import start_ack_deadline
from broker.driver.pushed import PushedBatchedMessageIterator, PushedMessageIterator
from broker.errors import AckError, ConfigError, ProvisioningError, UnknownTopic

if TYPE_CHECKING:
    from broker.backends.rabbitmq.backend import RabbitmqConnection

__all__ = [
    "RabbitmqAcker",
    "RabbitmqBatchedMessageIterator",
    "RabbitmqMessageIterator",
    "RabbitmqSubscription",
    "channel_gone",
]


def channel_gone(delivery: AbstractIncomingMessage) -> bool:
    """True when the channel ``delivery`` came on is closed (aio-pika raises from ``.channel`` then)."""
    try:
        return bool(delivery.channel.is_closed)
    except ChannelInvalidStateError:
        return True


class RabbitmqAcker:
    """Settles the deliveries of one consumer: ack, nack (with an emulated delay), deadline, dead-letter."""

    def __init__(self, ack_deadline: float | None) -> None:
        self.ack_deadline = ack_deadline
        self._timers: dict[int, asyncio.TimerHandle] = {}
        self._tasks: set[asyncio.Task[None]] = set()
        #: Deliveries with a settlement being sent (their SDK object marks them only once it is
        #: sent): "returning" (the deadline fired: back to the queue) or "settling" (ack, nack,
        #: dead-letter). The other kind must then not go out too: the broker would get both.
        self._busy: dict[int, str] = {}
        #: Set once the consumer closes: settling then raises (the broker takes the messages back).
        self._closed = False
        #: Settlements on their way to the socket, and the event their last one sets while closing.
        self._sending = 0
        self._sent: asyncio.Event | None = None

    def native_properties(self, message: Message) -> dict[str, Any]:
        """The message's headers with their AMQP types (``broker.typed.native_properties``)."""
        return native_properties(message.raw)

    def _tag(self, message: Message) -> int:
        return id(message.raw)  # not the delivery tag: a reopened channel counts from 1 again

    def handed_out(self, message: Message) -> None:
        """Start the ack-deadline timer of a message just handed out."""
        if self.ack_deadline is not None:
            start_ack_deadline((message,), self.ack_deadline)
            self._arm(message, self.ack_deadline)

    def _arm(self, message: Message, delay: float) -> None:
        tag = self._tag(message)
        old = self._timers.pop(tag, None)
        if old is not None:
            old.cancel()
        loop = asyncio.get_running_loop()
        self._timers[tag] = loop.call_later(delay, self._requeue_later, message)

    def _disarm(self, message: Message) -> None:
        timer = self._timers.pop(self._tag(message), None)
        if timer is not None:
            timer.cancel()

    def _requeue_later(self, message: Message) -> None:
        self._timers.pop(self._tag(message), None)
        task = asyncio.ensure_future(self._requeue(message))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _requeue(self, message: Message) -> None:
        raw: AbstractIncomingMessage = message.raw
        tag = self._tag(message)
        if raw.processed or channel_gone(raw) or tag in self._busy:
            return  # settled meanwhile (or being settled), or the broker requeues it anyway
        self._busy[tag] = "returning"  # before the await: an ack from now on must fail
        try:
            await raw.nack(requeue=True)
        except Exception:  # the channel went away: the broker requeued it anyway
            pass
        finally:
            self._busy.pop(tag, None)

    def _returning(self, message: Message) -> bool:
        return self._busy.get(self._tag(message)) == "returning"

    async def _settle(self, message: Message, doing: str) -> None:
        if self._closed:
            raise AckError(
                f"{doing} {message.id!r}: its consumer is closed; the message went back to the queue"
            )
        if self._returning(message):
            raise AckError(f"{doing} {message.id!r}: its ack deadline passed; it goes back to the queue")
        self._disarm(message)
        tag = self._tag(message)
        self._busy[tag] = "settling"  # a deadline that fired already must not return it now
        raw: AbstractIncomingMessage = message.raw
        self._sending += 1
        try:
            if doing == "acking":
                await raw.ack()
            elif doing == "nacking":
                await raw.nack(requeue=True)
            else:
                await raw.reject(requeue=False)
        except Exception as exc:
            raise translate(exc, f"{doing} message {message.id!r}", AckError) from exc
        finally:
            self._busy.pop(tag, None)
            self._sending -= 1
            if not self._sending and self._sent is not None:
                self._sent.set()

    async def ack(self, message: Message) -> None:
        """``basic.ack``."""
        await self._settle(message, "acking")

    async def nack(self, message: Message, delay: float | None) -> None:
        """``basic.nack(requeue=True)``, after ``delay`` seconds (held by this client meanwhile)."""
        if not delay:
            await self._settle(message, "nacking")
            return
        raw: AbstractIncomingMessage = message.raw
        if raw.processed or self._returning(message) or self._closed:
            await self._settle(message, "nacking")  # raises the AckError
        self._arm(message, delay)

    async def in_progress(self, message: Message) -> None:
        """Restart the message's ack-deadline timer."""
        raw: AbstractIncomingMessage = message.raw
        if self._closed:
            raise AckError(f"message {message.id!r}: the consumer is closed; the broker took it back")
        if raw.processed or self._returning(message):
            raise AckError(f"message {message.id!r} passed its ack deadline and went back to the queue")
        if self.ack_deadline is not None:
            self._arm(message, self.ack_deadline)

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """``basic.reject(requeue=False)``: to the queue's dead-letter exchange, or dropped without one."""
        await self._settle(message, "dead-lettering")

    async def close(self, timeout: float) -> None:
        """Refuse settling from now on, stop every timer, and wait for settlements already sent.

        Called before the channel closes: an ack that returned must reach the broker ahead of
        the channel's Close (which makes the broker discard what follows and take back every
        unsettled message), so no acked message is delivered again.
        """
        self._closed = True
        for timer in self._timers.values():
            timer.cancel()
        self._timers.clear()
        for task in self._tasks:
            task.cancel()
        if self._sending:
            self._sent = asyncio.Event()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._sent.wait(), timeout)


class RabbitmqSubscription:
    """The push driver of one subscription: declares and consumes its queue, maps deliveries."""

    def __init__(
        self, connection: RabbitmqConnection, topic: str, subscription: str, options: ConsumerOptions
    ) -> None:
        self._connection = connection
        self.topic = check_name(topic, "topic (exchange)")
        self.queue = options.queue if options.queue is not None else queue_name(topic, subscription)
        self.name = repr(self.queue)
        self.options = options
        self.acker = RabbitmqAcker(options.ack_deadline)
        self._channel: AbstractChannel | None = None

    def entities(self) -> list[Entity]:
        """The exchanges and the queue this consumer uses (what ``provision=verify`` checks)."""
        entities: list[Entity] = [("exchange", self.topic), ("queue", self.queue)]
        if self.options.dead_letter_topic is not None:
            entities.append(("exchange", self.options.dead_letter_topic))
        return entities

    async def start(self, deliver: Callable[[Any], None]) -> None:
        """Make sure of the queue (see below), then consume it into ``deliver``.

        ``provision=create`` declares the exchange(s), the quorum queue and its binding (a queue
        named with the ``queue`` option is not declared); ``verify`` declares nothing and checks
        the exchange(s) and the queue passively first (``ProvisioningError`` naming the missing
        ones); ``none`` checks nothing and lets the broker's ``404`` surface as ``UnknownTopic``.
        Under ``verify`` and ``none`` the queue is bound only with an explicit ``binding_key`` or
        ``binding_arguments`` (a binding needs no ``configure`` permission).
        """
        connection, options = self._connection, self.options
        settings, provision = connection.settings, connection.provision
        if (
            options.binds(provision)
            and options.binding_key is None
            and not options.binding_arguments
            and settings.exchange_kind(self.topic) == "direct"
        ):  # "#" is no pattern on a direct exchange: the queue would get no message
            raise ConfigError(
                f"the exchange of topic {self.topic!r} is a direct exchange: subscription queue "
                f"{self.queue!r} needs a binding_key (the routing key of the messages it is to get)"
            )
        if provision == "verify":
            missing = await missing_entities(connection.channel, self.entities(), settings.close_timeout)
            connection.verified.update(self.entities())
            if missing:
                raise ProvisioningError("rabbitmq", missing)
        channel = await connection.channel(prefetch=options.prefetch)

        async def delivered(incoming: AbstractIncomingMessage) -> None:
            deliver(incoming)

        doing = f"subscribing {self.queue!r} to {self.topic!r}"
        try:
            if provision == "create":
                exchange: AbstractExchange | str = await declare_exchange(channel, self.topic, settings)
                if options.dead_letter_topic is not None:
                    await declare_exchange(channel, options.dead_letter_topic, settings)
            else:
                exchange = self.topic
            if provision == "create" and options.queue is None:
                queue = await channel.declare_queue(
                    self.queue, durable=True, arguments=options.queue_arguments()
                )
            else:
                # passive: declares nothing (a missing queue is the broker's 404), and registers the
                # queue with the robust channel, which consumes it again when the channel reopens
                queue = await channel.declare_queue(self.queue, passive=True)
            if options.binds(provision):
                await queue.bind(
                    exchange,
                    routing_key=options.binding_key if options.binding_key is not None else "#",
                    arguments=options.binding_headers() or None,  # type: ignore[arg-type]
                )
            await queue.consume(delivered)
        except BaseException as exc:
            await close_quietly(channel, settings.close_timeout)
            if isinstance(exc, ProvisioningError):
                raise
            if isinstance(exc, Exception):
                error = translate(exc, doing)
                if isinstance(error, UnknownTopic) and provision == "none":
                    error = UnknownTopic(f"{error} (provision='none' declares nothing)")
                raise error from exc
            raise
        self._channel = channel

    def stale(self, delivery: AbstractIncomingMessage) -> bool:
        """A delivery of a channel closed since (a lost connection): it is dropped, not handed out.

        Nothing can settle it any more, and the broker puts it back in the queue (at once, or
        when it starts again after it died); the reopened channel delivers it again.
        """
        return channel_gone(delivery)

    def message(self, delivery: AbstractIncomingMessage, now: float) -> Message:
        """The delivery as a Message; its ack-deadline timer starts now."""
        message = to_message(delivery, self.acker, now)
        self.acker.handed_out(message)
        return message

    async def stop(self) -> None:
        """Close the channel: the broker returns every unsettled message of this consumer."""
        timeout = self._connection.settings.close_timeout
        await self.acker.close(timeout)
        channel, self._channel = self._channel, None
        await close_quietly(channel, timeout)


class RabbitmqMessageIterator(PushedMessageIterator):
    """A MessageIterator on the quorum queue of a subscription."""

    def __init__(
        self, connection: RabbitmqConnection, topic: str, subscription: str, options: ConsumerOptions
    ) -> None:
        super().__init__(RabbitmqSubscription(connection, topic, subscription, options))


class RabbitmqBatchedMessageIterator(PushedBatchedMessageIterator):
    """A BatchedMessageIterator: what the broker has delivered so far, up to ``batch_size``."""

    def __init__(
        self,
        connection: RabbitmqConnection,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
        batch_size: int,
        batch_timeout: float,
    ) -> None:
        super().__init__(
            RabbitmqSubscription(connection, topic, subscription, options), batch_size, batch_timeout
        )
