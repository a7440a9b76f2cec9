"""Receiving from queues and subscriptions: the MessageIterator, the BatchedMessageIterator and their Acker.

Each consumer has its own SDK client and receiver, opened in the background as soon as the
consumer is created. One SDK receive call runs at a time, in a task of its own that callers wait
on; when the last waiting caller times out or is cancelled the call is cancelled too (the SDK
keeps partial reads and releases messages that reach it outside a receive call), so a consumer
that is not being read holds no locked messages.

Settlement (peek-lock): ``ack`` completes, ``nack()`` abandons (Service Bus counts a delivery and
dead-letters after the entity's max delivery count), ``nack(delay)`` on a queue schedules a copy
``delay`` seconds ahead and completes the original (the copy keeps the message id and carries the
attempts so far); on a subscription or a dead-letter queue, where a scheduled copy would reach
other subscriptions or the wrong queue, the consumer keeps the lock (renewing it) for ``delay``
seconds and then abandons. ``in_progress`` renews the message lock (the session lock for session
receivers); ``dead_letter`` dead-letters with the reason. With ``lock_renewal`` the consumer renews
the locks of unsettled messages itself, one at a time. In receive-and-delete mode messages are
gone once received: ``ack`` is a no-op and nacking raises ``NotSupported``.

SDK settlements and management requests on one receiver run one at a time: concurrent ones wait
for each other's reads, and concurrent requests can reach the wire out of delivery-id order.

Sessions: with ``sessions=True`` the consumer takes the next available session and, once that
session has nothing more and none of its messages is unsettled, lets it go and takes the next; with
``session_id`` it stays on that session.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import weakref
from collections import deque
from collections.abc import Awaitable, Sequence
from dataclasses import dataclass
from typing import Any, Self

from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusReceivedMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient, ServiceBusReceiver, ServiceBusSender
from azure.servicebus.exceptions import (
    MessagingEntityNotFoundError,
    OperationTimeoutError,
    ServiceBusError,
    SessionLockLostError,
)

from broker import Message
from broker.backends.servicebus.admin import EntityAdmin
from broker.backends.servicebus.connection import Shutdowns, close_quietly, make_client
from broker.backends.servicebus.errors import translate
from broker.backends.servicebus.mapping import (
    dead_letter_copy,
    native_properties,
    redelivery_copy,
    to_message,
)
from broker.backends.servicebus.settings import ConsumerOptions, ServiceBusSettings, check_batch_size
from broker.driver.acking import own_acker, start_ack_deadline
from broker.driver.pulled import PulledBatchedMessageIteration
from broker.driver.resources import AsyncResource, MessageIteration
from broker.driver.settling import ack_in_turn
from broker.errors import AckError, ClosedError, ConfigError, NotSupported, ReceiveError, Timeout

__all__ = ["Entity", "ReceiveTarget", "ServiceBusBatchedMessageIterator", "ServiceBusMessageIterator"]

log = logging.getLogger("broker.backends.servicebus")

#: Seconds a settle-at-shutdown (abandoning messages never handed out) may take in all.
SHUTDOWN_SETTLE_TIMEOUT = 5.0


@dataclass(frozen=True, slots=True)
class Entity:
    """What a consumer reads: a queue (``subscription`` None) or a topic's subscription."""

    topic: str
    subscription: str | None

    def __str__(self) -> str:
        if self.subscription is None:
            return self.topic
        return f"{self.topic}/Subscriptions/{self.subscription}"


@dataclass(frozen=True, slots=True)
class ReceiveTarget:
    """What a consumer receives from (``entity``, with ``options``) and through what: the
    connection's settings, its shutdown registry and its management client (None: the consumer
    creates no missing entity)."""

    settings: ServiceBusSettings
    entity: Entity
    options: ConsumerOptions
    shutdowns: Shutdowns
    admin: EntityAdmin | None = None


#: What a settlement or lock renewal can raise: the SDK's errors, and the ``ValueError`` its
#: receiver raises once the connection it used has died ("the handler has already been shutdown").
_SETTLE_ERRORS = (ServiceBusError, ValueError)


#: How many messages abandoned at their deadline a settler remembers (see ``_Settler.returned``).
_RETURNED_KEPT = 4096


class _Settler:
    """The :class:`~broker.message.Acker` of the messages one SDK receiver delivered."""

    __slots__ = ("_consumer", "outstanding", "receiver", "returned", "sessions")

    def __init__(self, consumer: _Receiving, receiver: ServiceBusReceiver, sessions: bool) -> None:
        self._consumer = consumer
        self.receiver = receiver
        self.sessions = sessions
        self.outstanding = 0  # messages received and not settled yet
        #: The SDK messages abandoned at their ack deadline, by ``id()``, held weakly (a dead entry
        #: matches no later object of the same ``id``): they left ``outstanding`` then, so a late
        #: settlement of one does not count again. Bounded: the oldest entries go first.
        self.returned: dict[int, weakref.ref[Any]] = {}

    async def _settle(self, operation: Awaitable[Any], message: Message, what: str) -> None:
        consumer = self._consumer
        consumer.settling_started()
        try:
            async with consumer.settle_lock:
                await operation
        except _SETTLE_ERRORS as exc:
            raise translate(exc, f"cannot {what} message {message.id}", AckError) from exc
        finally:
            consumer.settling_ended()
            consumer.stop_renewing(message)
            returned = self.returned.get(id(message.raw))
            if returned is not None and returned() is message.raw:
                del self.returned[id(message.raw)]  # counted when it was abandoned at its deadline
            elif self.outstanding > 0:
                self.outstanding -= 1

    def native_properties(self, message: Message) -> dict[str, Any]:
        """The message's application properties with their AMQP types (``broker.typed.native_properties``)."""
        return native_properties(message.raw)

    async def ack(self, message: Message) -> None:
        """Complete the message."""
        if self._consumer.receive_and_delete:
            return
        await self._settle(self.receiver.complete_message(message.raw), message, "complete")

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Complete this receiver's pending messages among ``messages`` in turn; returns the others.

        The SDK settles one message per disposition and waits for the broker's answer; in turn is
        faster than all at once, whose waits contend for the connection's reader.
        """
        return await ack_in_turn(messages, self, self.ack)

    async def nack(self, message: Message, delay: float | None) -> None:
        """Abandon now, or redeliver after ``delay`` seconds (see the module docstring)."""
        consumer = self._consumer
        if consumer.receive_and_delete:
            raise NotSupported(
                "messages received in receive_and_delete mode are already removed; nack cannot redeliver"
            )
        limit = consumer.options.max_attempts
        if limit is not None and (message.delivery_attempt or 1) >= limit:
            await self.dead_letter(
                message, "MaxDeliveryCountExceeded", f"nacked on delivery {limit} of {limit}"
            )
            return
        if not delay:
            await self._settle(self.receiver.abandon_message(message.raw), message, "abandon")
        elif consumer.copies_on_delay:
            await self._settle(self._redeliver_copy(message, delay), message, "schedule the redelivery of")
        else:
            consumer.hold_then_abandon(self, message, delay)

    async def _redeliver_copy(self, message: Message, delay: float) -> None:
        when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=delay)
        sender = await self._consumer.copy_sender()
        await sender.schedule_messages(redelivery_copy(message), when)
        await self.receiver.complete_message(message.raw)

    async def abandon_quietly(self, message: Message) -> None:
        """Abandon, logging instead of raising (shutdown and delayed nacks)."""
        try:
            await self._settle(self.receiver.abandon_message(message.raw), message, "abandon")
        except Exception as exc:
            log.debug("could not abandon message %s: %r", message.id, exc)

    async def in_progress(self, message: Message) -> None:
        """Renew the message lock (the session lock on a session receiver)."""
        if self._consumer.receive_and_delete:
            return
        await self.renew(message)
        self._consumer.extend_deadline(message)

    async def renew(self, message: Message) -> None:
        """Renew the lock that protects ``message``."""
        consumer = self._consumer
        consumer.settling_started()
        try:
            async with consumer.settle_lock:  # management requests one at a time (see settle_lock)
                if self.sessions:
                    await self.receiver.session.renew_lock()
                else:
                    await self.receiver.renew_message_lock(message.raw)
        except _SETTLE_ERRORS as exc:
            raise translate(exc, f"cannot renew the lock of message {message.id}", AckError) from exc
        finally:
            consumer.settling_ended()

    def lock_left(self, raw: ServiceBusReceivedMessage) -> float | None:
        """Seconds until the lock protecting ``raw`` expires (None: unknown)."""
        until = self.receiver.session.locked_until_utc if self.sessions else raw.locked_until_utc
        if until is None:
            return None
        return (until - datetime.datetime.now(datetime.UTC)).total_seconds()

    async def dead_letter(self, message: Message, reason: str | None, description: str | None = None) -> None:
        """Dead-letter ``message`` with ``reason``: to ``dead_letter_topic`` when set, else the DLQ."""
        consumer = self._consumer
        if consumer.receive_and_delete:
            raise NotSupported("messages received in receive_and_delete mode are already removed")
        reason = reason or "dead-lettered by the consumer"
        description = description or f"delivery attempt {message.delivery_attempt}"
        if consumer.options.dead_letter_topic is not None:
            await self._settle(self._forward(message, reason, description), message, "dead-letter")
            return
        operation = self.receiver.dead_letter_message(
            message.raw, reason=reason, error_description=description
        )
        await self._settle(operation, message, "dead-letter")

    async def _forward(self, message: Message, reason: str, description: str) -> None:
        sender = await self._consumer.dead_letter_sender()
        await sender.send_messages(dead_letter_copy(message, reason, description))
        await self.receiver.complete_message(message.raw)


class _Receiving(AsyncResource):
    """What both iterators share: the SDK receiver, one receive call at a time, the buffer, closing."""

    def __init__(self, target: ReceiveTarget) -> None:
        settings, entity, options = target.settings, target.entity, target.options
        self._settings = settings
        self.entity = entity
        self.options = options
        self._shutdowns = target.shutdowns
        self._admin = target.admin
        self._key_to = settings.key_to
        self.receive_and_delete = options.receive_mode == "receive_and_delete"
        self.copies_on_delay = entity.subscription is None and not options.sub_queue
        self._next_session = options.sessions and options.session_id is None
        self._buffer: deque[Message] = deque()
        self._client: ServiceBusClient | None = None
        self._receiver: ServiceBusReceiver | None = None
        self._settler: _Settler | None = None
        self._renewals: dict[int, tuple[Message, float, float]] = {}  # id -> (message, stop at, lock length)
        self._abandon_at_stop: set[int] = set()  # ids of renewals that end with an abandon (ack_deadline)
        self._renewing: asyncio.Task[None] | None = None
        self._sender: ServiceBusSender | None = None
        self._sender_lock: asyncio.Lock | None = None
        self._dead_letter_sender: ServiceBusSender | None = None
        self._lock_checked = False  # ack_deadline: the entity's lock duration was compared with it
        self._opening: asyncio.Task[ServiceBusReceiver] | None = None
        self._fetching: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._held: set[asyncio.Task[None]] = set()
        self._waiters = 0
        self._settling = 0
        self._receiving_call = False
        self._idle = asyncio.Event()  # set while no settlement is in flight
        self._idle.set()
        #: One SDK settlement or lock renewal at a time: concurrent settlements contend for the
        #: connection's reader, and concurrent management requests on one link can reach the wire
        #: out of delivery-id order (which makes the broker close the connection).
        self.settle_lock = asyncio.Lock()
        self._closed = False
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._opening = loop.create_task(self._open())  # open while the caller gets ready
        self._opening.add_done_callback(_retrieve)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.entity}{' closed' if self._closed else ''}>"

    # -- the SDK receiver ---------------------------------------------------------------------------
    def _make_receiver(self, client: ServiceBusClient) -> ServiceBusReceiver:
        options = self.options
        kwargs: dict[str, Any] = {
            "receive_mode": (
                ServiceBusReceiveMode.RECEIVE_AND_DELETE
                if self.receive_and_delete
                else ServiceBusReceiveMode.PEEK_LOCK
            ),
            "prefetch_count": options.prefetch,
            "max_wait_time": options.max_wait,
        }
        if options.sub_queue:
            kwargs["sub_queue"] = (
                ServiceBusSubQueue.DEAD_LETTER
                if options.sub_queue == "dead_letter"
                else ServiceBusSubQueue.TRANSFER_DEAD_LETTER
            )
        if options.uses_sessions:
            kwargs["session_id"] = options.session_id or NEXT_AVAILABLE_SESSION
        entity = self.entity
        if entity.subscription is None:
            return client.get_queue_receiver(entity.topic, **kwargs)
        return client.get_subscription_receiver(entity.topic, entity.subscription, **kwargs)

    async def _ensure_entity(self) -> None:
        """Create the queue or subscription this consumer reads, when missing (``create_missing``).

        The admin remembers what it made or found, one request at a time: calling this from both
        ``__aenter__`` and the first open sends one request.
        """
        admin = self._admin
        if admin is not None and admin.verify and not self.options.sub_queue:
            await admin.verify_consumer_entity(self.entity.topic, self.entity.subscription)
        if admin is not None and admin.enabled and not self.options.sub_queue:
            await admin.ensure_consumer_entity(self.entity.topic, self.entity.subscription, self.options)

    async def __aenter__(self) -> Self:
        """Entering creates what the consumer reads (if missing): what is published afterwards reaches it.

        Without ``create_missing`` (or the Manage right), a queue or subscription that does not exist
        raises ``UnknownTopic`` here. Other failures to open surface at the first receive.
        """
        await self._ensure_entity()
        if not self.options.uses_sessions:  # a session receiver opens when a session is free
            try:
                await self._ready()
            except MessagingEntityNotFoundError as exc:
                raise translate(exc, f"cannot receive from {self.entity}", ReceiveError) from exc
            except Exception as exc:  # reported by the first receive, which opens again
                log.debug("opening the receiver of %s failed: %r", self.entity, exc)
        return self

    async def _open(self) -> ServiceBusReceiver:
        await self._ensure_entity()
        if self._client is None:
            self._client = make_client(self._settings)
        receiver = self._make_receiver(self._client)
        try:
            await receiver.__aenter__()
        except BaseException:
            self._shutdowns.start(close_quietly(receiver, f"a receiver of {self.entity}"))
            raise
        if self._closed:  # closed while opening: shut it down with the rest
            self._shutdowns.start(close_quietly(receiver, f"a receiver of {self.entity}"))
            raise ClosedError(f"the consumer of {self.entity} is closed")
        self._receiver = receiver
        self._settler = _Settler(self, receiver, self.options.uses_sessions)
        return receiver

    async def _ready(self) -> ServiceBusReceiver:
        receiver = self._receiver
        if receiver is not None:
            return receiver
        opening = self._opening
        if opening is None:
            opening = self._opening = asyncio.get_running_loop().create_task(self._open())
            opening.add_done_callback(_retrieve)
        try:
            return await asyncio.shield(opening)
        finally:
            if opening.done():
                self._opening = None

    def _let_go(self) -> None:
        """Drop the current receiver (an idle session) so the next fetch opens another."""
        receiver, self._receiver, self._settler = self._receiver, None, None
        if receiver is not None:
            self._shutdowns.start(close_quietly(receiver, f"a session receiver of {self.entity}"))

    # -- settlements and receive calls take turns ----------------------------------------------------
    # The SDK's receive loop holds the connection's reader between frames, so a settlement that
    # waits for the broker's answer while a receive call is running waits for the receive loop's
    # read timeouts (0.2 s and more per settlement). Settlements therefore interrupt a receive call
    # that has brought nothing yet, and receive calls wait until no settlement is in flight.
    def settling_started(self) -> None:
        """A settlement (or lock renewal) begins: pause receiving."""
        self._settling += 1
        self._idle.clear()
        fetch = self._fetching
        if fetch is not None and not fetch.done() and self._receiving_call:
            fetch.cancel()

    def settling_ended(self) -> None:
        """A settlement is over: receiving may go on once none is left."""
        self._settling -= 1
        if self._settling <= 0:
            self._settling = 0
            self._idle.set()

    # -- receiving ----------------------------------------------------------------------------------
    async def _fetch(self, limit: int, wait: float) -> None:
        """One SDK receive call; what it brings goes to the buffer, a failure to ``_failure``."""
        try:
            try:
                receiver = await self._ready()
            except OperationTimeoutError:
                if self._next_session:
                    return  # no session has messages right now
                raise
            if self._settling:
                return  # let the settlements finish first; the caller starts another call
            self._receiving_call = True
            try:
                raws = await receiver.receive_messages(max_message_count=limit, max_wait_time=wait)
            except SessionLockLostError:
                self._let_go()
                return
            finally:
                self._receiving_call = False
            settler = self._settler
            if raws and settler is not None:
                key_to = self._key_to
                messages = [to_message(raw, settler, key_to) for raw in raws]
                settler.outstanding += len(raws)
                if not self.receive_and_delete:
                    if self.options.ack_deadline is not None and not self._lock_checked:
                        self._check_lock_duration(settler, messages)
                    if self.options.max_attempts is not None:
                        messages = await self._dead_letter_used_up(settler, messages)
                    if self.options.ack_deadline is not None:
                        start_ack_deadline(messages, self.options.ack_deadline)
                        self._start_renewing(messages, self.options.ack_deadline, abandon=True)
                    elif self.options.lock_renewal:
                        self._start_renewing(messages, self.options.lock_renewal, abandon=False)
                self._buffer.extend(messages)
            elif self._next_session and settler is not None and settler.outstanding == 0 and not self._buffer:
                self._let_go()
        except asyncio.CancelledError:
            raise
        except ClosedError:
            pass
        except BaseException as exc:
            self._failure = exc

    def _check_lock_duration(self, settler: _Settler, messages: list[Message]) -> None:
        """Raise ``ConfigError`` when the entity's lock outlasts ``ack_deadline`` (see ConsumerOptions).

        The received messages are abandoned first (the consumer cannot go on with this entity).
        """
        deadline = self.options.ack_deadline
        assert deadline is not None
        lengths = [left for m in messages if (left := settler.lock_left(m.raw)) is not None]
        if not lengths:
            return
        self._lock_checked = True
        lock = max(lengths)
        if lock <= deadline + max(1.0, 0.1 * deadline):
            return
        for message in messages:
            self._shutdowns.start(settler.abandon_quietly(message))
        raise ConfigError(
            f"ack_deadline={deadline:g}s cannot be honoured on {self.entity}: its lock duration is about "
            f"{lock:.0f}s, and a consumer that stops without settling leaves its messages locked that long "
            "(renewing only extends a lock). Set the entity's LockDuration to at most ack_deadline, or ask "
            "for an ack_deadline of at least the lock duration."
        )

    async def _dead_letter_used_up(self, settler: _Settler, messages: list[Message]) -> list[Message]:
        """Dead-letter the messages delivered more than ``max_attempts`` times; the others."""
        limit = self.options.max_attempts
        assert limit is not None
        keep = []
        for message in messages:
            if (message.delivery_attempt or 1) <= limit:
                keep.append(message)
                continue
            try:
                await settler.dead_letter(
                    message,
                    "MaxDeliveryCountExceeded",
                    f"delivered {(message.delivery_attempt or 1) - 1} times",
                )
            except AckError as exc:  # its lock is gone: it comes back and is tried again then
                log.warning("could not dead-letter message %s: %r", message.id, exc)
        return keep

    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        """Up to ``limit`` messages, as soon as any are there; ``Timeout`` after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        buffer = self._buffer
        while True:
            if self._closed:
                raise ClosedError(f"the consumer of {self.entity} is closed")
            if buffer:
                if limit == 1:
                    return [buffer.popleft()]
                return [buffer.popleft() for _ in range(min(limit, len(buffer)))]
            failure = self._failure
            if failure is not None:
                self._failure = None
                raise translate(failure, f"receiving from {self.entity} failed", ReceiveError) from failure
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise Timeout(f"no message from {self.entity} within {timeout}s")
            if self._settling:
                try:
                    async with asyncio.timeout(remaining):
                        await self._idle.wait()
                except TimeoutError:
                    pass
                continue
            fetch = self._fetching
            if fetch is None or fetch.done():
                wait = self.options.max_wait if remaining is None else min(self.options.max_wait, remaining)
                fetch = self._fetching = loop.create_task(self._fetch(limit, max(wait, 0.05)))
            self._waiters += 1
            try:
                await asyncio.wait((fetch,), timeout=remaining)
            finally:
                self._waiters -= 1
                if not self._waiters and not fetch.done():
                    # Nobody waits any more: stop the SDK call rather than let it lock messages that
                    # nobody takes (the SDK releases what reaches it outside a receive call).
                    fetch.cancel()

    # -- automatic lock renewal ----------------------------------------------------------------------
    # The SDK's AutoLockRenewer renews each message from a task of its own; on one receiver those
    # concurrent management requests can reach the wire out of order. Renewals here run in turn,
    # from one task per consumer, when half of a lock's time is gone, for ``lock_renewal`` seconds.
    # With ``ack_deadline`` the same loop abandons each unsettled message at its deadline.
    def _start_renewing(self, messages: list[Message], seconds: float, *, abandon: bool) -> None:
        loop = asyncio.get_running_loop()
        stop_at = loop.time() + seconds
        for message in messages:
            settler = own_acker(message)
            left = settler.lock_left(message.raw) if isinstance(settler, _Settler) else None
            if left is not None and left > 0:
                self._renewals[id(message)] = (message, stop_at, left)
                if abandon:
                    self._abandon_at_stop.add(id(message))
        if self._renewals and (self._renewing is None or self._renewing.done()):
            self._renewing = loop.create_task(self._renew_loop())
            self._renewing.add_done_callback(_retrieve)

    def extend_deadline(self, message: Message) -> None:
        """``message`` is in progress: its ``ack_deadline`` starts again from now (as on every backend)."""
        deadline = self.options.ack_deadline
        entry = self._renewals.get(id(message))
        if deadline is None or entry is None or id(message) not in self._abandon_at_stop:
            return
        self._renewals[id(message)] = (message, asyncio.get_running_loop().time() + deadline, entry[2])

    def stop_renewing(self, message: Message) -> None:
        """``message`` was settled: its lock needs no more renewals."""
        if self._renewals:
            self._renewals.pop(id(message), None)
            self._abandon_at_stop.discard(id(message))

    async def _renew_loop(self) -> None:
        loop = asyncio.get_running_loop()
        renewals = self._renewals
        while renewals and not self._closed:
            pause = 1.0
            for key, (message, stop_at, length) in list(renewals.items()):
                settler = own_acker(message)
                if message.settled or loop.time() >= stop_at or not isinstance(settler, _Settler):
                    renewals.pop(key, None)
                    if key in self._abandon_at_stop:
                        self._abandon_at_stop.discard(key)
                        if not message.settled and isinstance(settler, _Settler):
                            await self._deadline_passed(settler, message)
                    continue
                left = settler.lock_left(message.raw)
                if left is not None and left <= length / 2:
                    try:
                        await settler.renew(message)
                    except AckError as exc:
                        log.debug("lock renewal of %s failed: %r", message.id, exc)
                        renewals.pop(key, None)
                        continue
                    left = settler.lock_left(message.raw)
                if left is not None:
                    pause = min(pause, max(0.05, left - length / 2))
                if key in self._abandon_at_stop:
                    pause = min(pause, max(0.01, stop_at - loop.time()))
            await asyncio.sleep(pause)

    async def _deadline_passed(self, settler: _Settler, message: Message) -> None:
        """``ack_deadline`` passed with ``message`` unsettled: redeliver it (or dead-letter the last try).

        The message is abandoned through its acker, not ``message.nack()``: the application did not
        nack it, so it stays pending, and a late ``ack()`` is still sent (the broker refuses it, the
        lock being gone) and raises the AckError that names the deadline, as on every backend.
        """
        try:
            await settler.nack(message, None)
        except Exception as exc:  # settled meanwhile, or the lock is gone: Service Bus redelivers it
            log.debug("ack deadline of %s: could not abandon it: %r", message.id, exc)
        finally:
            returned = settler.returned
            if len(returned) >= _RETURNED_KEPT:
                del returned[next(iter(returned))]
            returned[id(message.raw)] = weakref.ref(message.raw)

    async def dead_letter_sender(self) -> ServiceBusSender:
        """A sender to ``dead_letter_topic`` (opened once)."""
        if self._dead_letter_sender is not None:
            return self._dead_letter_sender
        if self._sender_lock is None:
            self._sender_lock = asyncio.Lock()
        topic = self.options.dead_letter_topic
        assert topic is not None
        async with self._sender_lock:
            if self._dead_letter_sender is None:
                if self._client is None:
                    self._client = make_client(self._settings)
                sender = self._client.get_queue_sender(topic)
                await sender.__aenter__()
                self._dead_letter_sender = sender
            return self._dead_letter_sender

    # -- delayed redelivery ---------------------------------------------------------------------------
    async def copy_sender(self) -> ServiceBusSender:
        """A sender to this consumer's queue, for scheduled copies (opened once)."""
        if self._sender is not None:
            return self._sender
        if self._sender_lock is None:
            self._sender_lock = asyncio.Lock()
        async with self._sender_lock:
            if self._sender is None:
                if self._client is None:
                    self._client = make_client(self._settings)
                sender = self._client.get_queue_sender(self.entity.topic)
                await sender.__aenter__()
                self._sender = sender
            return self._sender

    def hold_then_abandon(self, settler: _Settler, message: Message, delay: float) -> None:
        """Keep ``message`` locked for ``delay`` seconds (renewing the lock), then abandon it."""
        if self._closed:
            self._shutdowns.start(settler.abandon_quietly(message))
            return
        task = asyncio.get_running_loop().create_task(self._abandon_later(settler, message, delay))
        self._held.add(task)
        task.add_done_callback(self._held.discard)

    @staticmethod
    async def _abandon_later(settler: _Settler, message: Message, delay: float) -> None:
        raw = message.raw
        loop = asyncio.get_running_loop()
        end = loop.time() + delay
        try:
            while (left := end - loop.time()) > 0:
                lock_left = settler.lock_left(raw)
                if lock_left is None or lock_left > left + 1.0:
                    await asyncio.sleep(left)
                    continue
                await asyncio.sleep(max(0.0, min(left, lock_left / 2)))
                if end - loop.time() > 0:
                    try:
                        await settler.renew(message)
                    except AckError as exc:
                        log.debug("delayed nack of %s: lock renewal failed: %r", message.id, exc)
                        return
        finally:
            await settler.abandon_quietly(message)

    # -- closing ----------------------------------------------------------------------------------------
    async def close(self) -> None:
        """Stop receiving; idempotent.

        Waiting calls raise ``ClosedError`` at once. Messages received but never handed out are
        abandoned, delayed nacks are abandoned now, and the SDK receiver closes in the background
        (the backend waits for it when it closes).
        """
        if self._closed:
            return
        self._closed = True
        tasks = [t for t in (self._opening, self._fetching, self._renewing) if t is not None]
        self._renewals.clear()
        self._abandon_at_stop.clear()
        for task in tasks:
            task.cancel()
        held = list(self._held)
        for task in held:
            task.cancel()
        buffered = list(self._buffer)
        self._buffer.clear()
        self._shutdowns.start(self._shutdown(tasks, held, buffered))

    async def _shutdown(
        self, tasks: list[asyncio.Task[Any]], held: list[asyncio.Task[None]], buffered: list[Message]
    ) -> None:
        await asyncio.gather(*tasks, *held, return_exceptions=True)
        if buffered and not self.receive_and_delete:
            with _suppress_timeout():
                async with asyncio.timeout(SHUTDOWN_SETTLE_TIMEOUT):
                    for message in buffered:
                        settler = own_acker(message)
                        if isinstance(settler, _Settler):
                            await settler.abandon_quietly(message)
        receiver, self._receiver = self._receiver, None
        sender, self._sender = self._sender, None
        dead_letters, self._dead_letter_sender = self._dead_letter_sender, None
        client, self._client = self._client, None
        await asyncio.gather(
            close_quietly(receiver, f"the receiver of {self.entity}"),
            close_quietly(sender, f"the redelivery sender of {self.entity}"),
            close_quietly(dead_letters, f"the dead-letter sender of {self.entity}"),
        )
        await close_quietly(client, f"the client of the consumer of {self.entity}")


class _suppress_timeout:
    """``contextlib.suppress(TimeoutError)`` that also logs."""

    def __enter__(self) -> None:
        return None

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: Any) -> bool:
        if exc_type is not None and issubclass(exc_type, TimeoutError):
            log.debug("abandoning buffered messages at shutdown took too long")
            return True
        return False


def _retrieve(task: asyncio.Task[Any]) -> None:
    """Mark a background task's exception as seen (it is re-raised by the caller that awaits it)."""
    if not task.cancelled():
        task.exception()


class ServiceBusMessageIterator(_Receiving, MessageIteration):
    """A MessageIterator on a queue or subscription (see the module docstring)."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; ``Timeout`` when none arrives within ``timeout`` seconds."""
        buffer = self._buffer
        if buffer and not self._closed:
            return buffer.popleft()
        return (await self._take(1, timeout))[0]


class ServiceBusBatchedMessageIterator(_Receiving, PulledBatchedMessageIteration):
    """A BatchedMessageIterator: one SDK receive call per batch, up to ``batch_size`` messages."""

    def __init__(self, target: ReceiveTarget, batch_size: int, batch_timeout: float) -> None:
        check_batch_size(batch_size)
        if batch_timeout <= 0:
            raise ValueError(f"batch_timeout must be > 0 seconds, got {batch_timeout}")
        super().__init__(target)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
