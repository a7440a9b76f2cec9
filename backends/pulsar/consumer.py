"""Per-message consumption of a Pulsar subscription: message iterators and their acker.

A consumer subscribes as soon as it is made inside a running event loop (``async with`` waits for
the subscription), receives on a thread (:mod:`broker.backends.pulsar.fetcher`) and settles messages
through the client:

* ``ack()`` acknowledges the message individually;
* ``nack()`` negatively acknowledges it: the broker redelivers it after the consumer's
  ``nack_redelivery_delay``. A per-call ``delay`` is not honoured (Pulsar has no per-message
  redelivery delay), which is why the backend does not claim ``delayed_nack``;
* ``in_progress()`` raises ``NotSupported``: Pulsar's ack timeout cannot be extended per message;
* ``dead_letter(reason)`` publishes the message to the dead-letter topic (``dead_letter_topic`` or
  Pulsar's default ``<topic>-<subscription>-DLQ``) with the properties Pulsar's own dead-letter
  policy sets (``REAL_TOPIC``, ``ORIGIN_MESSAGE_ID``) and acknowledges it.

Closing a consumer closes it on the broker and keeps its subscription, with every message not yet
acknowledged (lib-brokers unsubscribes instead, deleting them). ``unsubscribe()`` deletes the
subscription explicitly.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final, Self

import _pulsar  # type: ignore[import-not-found]
import pulsar  # type: ignore[import-untyped]

from broker import Message, OutboundMessage
from broker.backends.pulsar.callbacks import outcome, wait
from broker.backends.pulsar.errors import translate
from broker.backends.pulsar.fetcher import Fetcher
from broker.backends.pulsar.handle import CLOSE_TIMEOUT, ClientHandle, log
from broker.backends.pulsar.mapping import to_message, to_messages
from broker.backends.pulsar.settings import ConsumerOptions
from broker.driver.acking import start_ack_deadline
from broker.driver.batch_limits import check_batch_limits
from broker.driver.forwarding import Forwarded
from broker.driver.resources import AsyncResource, BatchedMessageIteration, MessageIteration
from broker.driver.settling import ack_in_turn
from broker.errors import AckError, ClosedError, NotSupported, ReceiveError

__all__ = [
    "CLOSE_TIMEOUT",
    "DeadLetterSink",
    "PulsarAcker",
    "PulsarBatchedMessageIterator",
    "PulsarMessageIterator",
    "Subscription",
    "SubscriptionTarget",
    "consumer_configuration",
]

#: Largest chunk the receiving thread takes in one go.
MAX_CHUNK: Final = 1000

_TYPES: Final = {
    "shared": _pulsar.ConsumerType.Shared,
    "key_shared": _pulsar.ConsumerType.KeyShared,
    "failover": _pulsar.ConsumerType.Failover,
    "exclusive": _pulsar.ConsumerType.Exclusive,
}
_POSITIONS: Final = {
    "earliest": _pulsar.InitialPosition.Earliest,
    "latest": _pulsar.InitialPosition.Latest,
}

#: Publishes one message to a topic: how the acker dead-letters.
DeadLetterSink = Callable[[str, OutboundMessage], Awaitable[None]]


def consumer_configuration(options: ConsumerOptions, batch_receive: int = 0) -> Any:
    """The client's consumer configuration for ``options``; batch receives take up to ``batch_receive``."""
    conf = _pulsar.ConsumerConfiguration()
    conf.consumer_type(_TYPES[options.subscription_type])
    conf.subscription_initial_position(_POSITIONS[options.initial_position])
    conf.receiver_queue_size(options.receiver_queue_size)
    conf.negative_ack_redelivery_delay_ms(round(options.nack_redelivery_delay * 1000))
    if options.ack_timeout is not None:
        conf.unacked_messages_timeout_ms(round(options.ack_timeout * 1000))
    if options.consumer_name:
        conf.consumer_name(options.consumer_name)
    conf.batch_index_ack_enabled(options.batch_index_ack)
    if batch_receive > 0:  # return what is ready within 1 ms instead of waiting for a full batch
        conf.batch_receive_policy(_pulsar.BatchReceivePolicy(batch_receive, -1, 1))
    if options.max_attempts is not None:
        policy = pulsar.ConsumerDeadLetterPolicy(options.max_attempts - 1, options.dead_letter_topic)
        conf.dead_letter_policy(policy.policy())
    return conf


def _chunk_size(options: ConsumerOptions, wanted: int) -> int:
    """How many messages the receiving thread takes at once.

    With an ack timeout the client starts a message's clock when the thread takes it, so the
    thread takes only ``wanted`` (1, or a batch), and only while a caller waits (on demand);
    without one, up to a receiver queue's worth ahead.
    """
    if options.ack_timeout is not None:
        return max(1, wanted)
    return max(wanted, min(options.receiver_queue_size, MAX_CHUNK))


class Subscription(ClientHandle):
    """One client consumer on a subscription, with its receiving thread; closing keeps the subscription.

    ``receive=False`` makes a consumer that never receives (it only makes the subscription exist).
    """

    def __init__(
        self,
        client: Any,
        topics: str | Sequence[str],
        name: str,
        options: ConsumerOptions,
        chunk: int,
        *,
        receive: bool = True,
    ) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a subscription name must be a non-empty string, got {name!r}")
        label = f"{topics!r}/{name}"
        super().__init__("consumer", label, f"subscribing to {label}")
        self._client = client
        self.topics = topics
        self.name = name
        self.options = options
        # The thread receives one message (waiting), then whatever else is ready with a batch receive.
        # Without an ack deadline it takes half a receiver queue at a time, so that the loop holds at
        # most ``chunk`` messages not handed out yet while the thread prepares the next half.
        step = min(chunk, options.receiver_queue_size)
        if options.ack_timeout is None:
            step = max(1, step // 2)
        more = step - 1
        self._conf = consumer_configuration(options, more)
        self._receives = receive
        self.fetcher = Fetcher(
            self._receive,
            self._receive_more if more > 0 else None,
            chunk,
            self._label,
            on_demand=options.ack_timeout is not None,
            chunk_max=step,
        )
        self._create_soon()

    def __repr__(self) -> str:
        return f"<Subscription {self._label} {self.options.subscription_type}>"

    @property
    def consumer(self) -> Any:
        """The client consumer, once subscribed (None before)."""
        return self.handle

    def _request(self, done: Callable[[Any], None]) -> None:
        self._client.subscribe_async_v2(self.topics, self.name, self._conf, done)

    def _starts_fetcher(self) -> bool:
        return self._receives

    def _receive(self, timeout_ms: int) -> Any:
        return self.handle.receive(timeout_ms)

    def _receive_more(self) -> list[Any]:
        return self.handle.batch_receive()  # type: ignore[no-any-return]

    async def unsubscribe(self) -> None:
        """Delete the subscription on the broker (with its unacknowledged messages), then close."""
        consumer = await self.open()
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        consumer.unsubscribe_async(outcome(future))
        await wait(future, f"unsubscribing {self._label}", ReceiveError, CLOSE_TIMEOUT)
        await self.close()


def _acknowledge(acknowledge: Callable[[Any], None], message: Message) -> None:
    try:
        acknowledge(message.raw)
    except _pulsar.PulsarException as exc:
        raise translate(exc, f"acknowledging {message.id}", AckError) from None


class PulsarAcker:
    """Settles the messages of one consumer through the client (see the module documentation)."""

    __slots__ = ("_dead_letters", "_dlq_topic", "_held", "_subscription")

    def __init__(self, subscription: Subscription, dead_letters: DeadLetterSink, dlq_topic: str) -> None:
        self._subscription = subscription
        self._dead_letters = dead_letters
        self._dlq_topic = dlq_topic
        #: Nacks held back to honour a delay longer than the consumer's nack_redelivery_delay.
        self._held: dict[int, asyncio.TimerHandle] = {}

    def _consumer(self) -> Any:
        consumer = self._subscription.consumer
        if consumer is None or self._subscription.closed:
            raise ClosedError("the consumer that received this message is closed")
        return consumer

    async def ack(self, message: Message) -> None:
        """Acknowledge ``message``."""
        subscription = self._subscription
        consumer = subscription.consumer
        if consumer is None or subscription.closed:
            raise ClosedError("the consumer that received this message is closed")
        _acknowledge(consumer.acknowledge, message)

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Acknowledge this consumer's pending messages among ``messages``; returns the others."""
        acknowledge = self._consumer().acknowledge  # a closed consumer refuses the whole call
        # The SDK acknowledges synchronously: a plain call per message, no coroutine per message.
        return await ack_in_turn(messages, self, lambda message: _acknowledge(acknowledge, message))

    async def nack(self, message: Message, delay: float | None) -> None:
        """Negatively acknowledge ``message``: redelivered after ``delay`` seconds (emulated).

        Pulsar redelivers a nacked message after the consumer's ``nack_redelivery_delay``; a
        longer ``delay`` is honoured by holding the nack in this client for the difference. A held
        message is not lost: if the consumer closes (or the process dies) first, the broker
        redelivers it as it does every unacknowledged message; if the consumer's ack timeout is
        shorter than the delay, that timeout redelivers it and no nack is sent.
        """
        consumer = self._consumer()
        options = self._subscription.options
        extra = (delay or 0.0) - options.nack_redelivery_delay
        if extra > 0.001:
            if options.ack_timeout is not None and delay is not None and delay >= options.ack_timeout:
                return  # the ack timeout redelivers it sooner than the nack would
            loop = asyncio.get_running_loop()
            self._held[id(message)] = loop.call_later(extra, self._nack_held, message)
            return
        try:
            consumer.negative_acknowledge(message.raw)
        except _pulsar.PulsarException as exc:
            raise translate(exc, f"nacking {message.id}", AckError) from None

    def _nack_held(self, message: Message) -> None:
        self._held.pop(id(message), None)
        subscription = self._subscription
        consumer = subscription.consumer
        if consumer is None or subscription.closed:
            return  # the broker redelivers what a closed consumer held
        try:
            consumer.negative_acknowledge(message.raw)
        except _pulsar.PulsarException as exc:  # the broker redelivers it on close or ack timeout
            log.warning("could not nack %s after its delay: %r", message.id, exc)

    def cancel_held(self) -> None:
        """Drop the held nacks (the consumer is closing: the broker redelivers those messages)."""
        for handle in self._held.values():
            handle.cancel()
        self._held.clear()

    async def in_progress(self, message: Message) -> None:
        """Not supported: Pulsar cannot extend one message's ack timeout."""
        raise NotSupported("Pulsar cannot extend a message's ack timeout; see capabilities.in_progress")

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Publish ``message`` to the dead-letter topic, then acknowledge it."""
        consumer = self._consumer()
        raw = message.raw
        attributes = dict(message.attributes)
        attributes["REAL_TOPIC"] = raw.topic_name()
        attributes["ORIGIN_MESSAGE_ID"] = str(raw.message_id())
        if reason:
            attributes["DEAD_LETTER_REASON"] = reason
        await self._dead_letters(self._dlq_topic, OutboundMessage(message.data, message.key, attributes))
        try:
            consumer.acknowledge(raw)
        except _pulsar.PulsarException as exc:
            raise translate(exc, f"acknowledging dead-lettered {message.id}", AckError) from None


@dataclass(frozen=True, slots=True)
class SubscriptionTarget:
    """What a message iterator consumes (``subscription`` of ``topic``, with ``options``) and through
    what: the client, and ``dead_letters`` to publish what it dead-letters."""

    client: Any
    topic: str
    subscription: str
    options: ConsumerOptions
    dead_letters: DeadLetterSink


class _Consuming(AsyncResource):
    """What both message iterators share: the subscription, the acker; ``async with`` subscribes."""

    def __init__(self, target: SubscriptionTarget) -> None:
        topic, subscription, options = target.topic, target.subscription, target.options
        self.topic = topic
        self.options = options
        chunk = _chunk_size(options, self._wanted())
        self._subscription = Subscription(target.client, topic, subscription, options, chunk)
        self._fetcher = self._subscription.fetcher
        dlq = options.dead_letter_topic or f"{topic}-{subscription}-DLQ"
        self._acker = PulsarAcker(self._subscription, target.dead_letters, dlq)

    def _wanted(self) -> int:
        """How many messages one call takes at most."""
        return 1

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic!r}/{self.subscription}>"

    subscription: Forwarded[str] = Forwarded("_subscription", "The subscription's name.", field="name")

    async def start(self) -> None:
        """Subscribe now (``async with`` does this)."""
        await self._subscription.open()

    async def close(self) -> None:
        """Close the consumer, keeping the subscription and its unacknowledged messages. Idempotent."""
        self._acker.cancel_held()
        await self._subscription.close()

    async def unsubscribe(self) -> None:
        """Delete the subscription (and every message it still holds), then close."""
        await self._subscription.unsubscribe()

    async def __aenter__(self) -> Self:
        await self.start()
        return self


class PulsarMessageIterator(_Consuming, MessageIteration):
    """A MessageIterator over one subscription of one topic."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; raises ``Timeout`` when none arrives within ``timeout`` seconds."""
        if self._subscription.consumer is None:
            await self._subscription.open(timeout)
        fetcher = self._fetcher
        raw = fetcher.ready()  # the common case under load: no coroutine to wait in
        if raw is None:
            raw = await fetcher.take(timeout)
        message = to_message(raw, self._acker, time.time())
        start_ack_deadline((message,), self.options.ack_timeout)
        return message


class PulsarBatchedMessageIterator(_Consuming, BatchedMessageIteration):
    """A BatchedMessageIterator: each batch is what is ready, up to ``batch_size``."""

    def __init__(self, target: SubscriptionTarget, batch_size: int, batch_timeout: float) -> None:
        check_batch_limits(batch_size, batch_timeout)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
        super().__init__(target)

    def _wanted(self) -> int:
        return self.batch_size

    def __repr__(self) -> str:
        return (
            f"<PulsarBatchedMessageIterator {self.topic!r}/{self.subscription} batch_size={self.batch_size}>"
        )

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to ``batch_size`` messages: those ready, else the first to arrive within the timeout.

        ``timeout`` defaults to the iterator's ``batch_timeout``; an empty list means none arrived.
        """
        wait_for = self.batch_timeout if timeout is None else timeout
        if self._subscription.consumer is None:
            await self._subscription.open(None if wait_for == 0 else max(wait_for, 1.0))
        raws = await self._fetcher.take_many(self.batch_size, wait_for)
        if not raws:
            return []
        messages = to_messages(raws, self._acker, time.time())
        start_ack_deadline(messages, self.options.ack_timeout)
        return messages
