"""The fake namespace's state: queues, topics, subscriptions, their messages, locks and sessions.

Nothing here touches sockets: the AMQP side (:mod:`tests.servicebus_fake.server`) turns frames
into calls on these objects and hands each entity ``Consumer`` objects to deliver through.
Everything runs on the server's single event thread, so there is no locking.

Semantics follow what the azure-servicebus SDK observes of Service Bus:

* a message delivered in peek-lock mode is locked for the entity's ``lock_duration``; complete
  removes it, abandon (or lock expiry) makes it available again with its delivery count raised,
  release makes it available without counting, defer parks it until it is received by sequence
  number, dead-letter moves it to the entity's ``$DeadLetterQueue``;
* once a message has failed ``max_delivery_count`` deliveries it is dead-lettered with the reason
  ``MaxDeliveryCountExceeded``;
* locks outlive the link that took them (as on Service Bus): a message delivered to a receiver
  that went away comes back when its lock expires;
* session-enabled entities hand each session to one receiver at a time; the session lock lasts
  ``lock_duration`` and is renewed through ``$management``;
* topics copy every message to each of their subscriptions (rules and filters are not modelled).
"""

from __future__ import annotations

import heapq
import itertools
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any, Protocol

from proton import Message, symbol, timestamp

__all__ = [
    "Consumer",
    "EntityError",
    "EntityOptions",
    "Lock",
    "Namespace",
    "Queue",
    "StoredMessage",
    "Topic",
]

DEAD_LETTER_SUFFIX = "/$deadletterqueue"
SUBSCRIPTIONS = "/subscriptions/"

X_OPT_SEQUENCE_NUMBER = symbol("x-opt-sequence-number")
X_OPT_ENQUEUED_TIME = symbol("x-opt-enqueued-time")
X_OPT_LOCKED_UNTIL = symbol("x-opt-locked-until")
X_OPT_SCHEDULED = symbol("x-opt-scheduled-enqueue-time")
X_OPT_DEAD_LETTER_SOURCE = symbol("x-opt-deadletter-source")

ACTIVE, DEFERRED, SCHEDULED = "active", "deferred", "scheduled"


class EntityError(Exception):
    """An operation the real service would refuse; ``condition`` is the AMQP error condition."""

    def __init__(self, condition: str, description: str) -> None:
        super().__init__(description)
        self.condition = condition
        self.description = description


def lock_lost(token: uuid.UUID) -> EntityError:
    """The error for a settlement or renewal of a lock that is gone."""
    return EntityError(
        "com.microsoft:message-lock-lost",
        f"The lock supplied is invalid. Either the lock expired, or the message has already been "
        f"removed from the queue. Reference: {token}",
    )


@dataclass(frozen=True, slots=True)
class EntityOptions:
    """The properties of a queue or subscription that the fake honours."""

    #: Seconds a peek-lock (or a session lock) lasts.
    lock_duration: float = 30.0
    #: Failed deliveries after which a message is dead-lettered.
    max_delivery_count: int = 10
    #: Messages need a session id and are received through session receivers.
    requires_session: bool = False
    #: The largest message a sender may send (bytes), announced on the link.
    max_message_size: int = 4 * 1024 * 1024
    #: Send dead-lettered messages to this queue or topic instead of ``$DeadLetterQueue``.
    forward_dead_lettered_messages_to: str | None = None


class Consumer(Protocol):
    """A receiving link as the entities see it."""

    #: The session this link holds (session receivers only).
    session_id: str | None
    #: Messages are removed on delivery (pre-settled) instead of locked.
    receive_and_delete: bool

    def credit(self) -> int:
        """How many more messages the client asked for."""

    def deliver(self, stored: StoredMessage, lock: Lock | None) -> None:
        """Send ``stored`` on the link (``lock`` is None in receive-and-delete mode)."""

    def session_lost(self, description: str) -> None:
        """The session lock expired: detach the link with ``session-lock-lost``."""


class StoredMessage:
    """One message in an entity."""

    __slots__ = (
        "delivery_count",
        "enqueued",
        "lock",
        "message",
        "scheduled_for",
        "seq",
        "session_id",
        "state",
    )

    def __init__(self, seq: int, message: Message, enqueued: float, session_id: str | None) -> None:
        self.seq = seq
        self.message = message
        self.enqueued = enqueued
        self.session_id = session_id
        self.delivery_count = 0
        self.state = ACTIVE
        self.lock: Lock | None = None
        self.scheduled_for: float | None = None

    def annotated(self, locked_until: float | None) -> Message:
        """The message with the broker's annotations set for a delivery or a peek."""
        message = self.message
        annotations = dict(message.annotations or {})
        annotations[X_OPT_SEQUENCE_NUMBER] = self.seq
        annotations[X_OPT_ENQUEUED_TIME] = timestamp(int(self.enqueued * 1000))
        if locked_until is not None:
            annotations[X_OPT_LOCKED_UNTIL] = timestamp(int(locked_until * 1000))
        else:
            annotations.pop(X_OPT_LOCKED_UNTIL, None)
        message.annotations = annotations
        message.delivery_count = self.delivery_count
        return message


class Lock:
    """A peek-lock on one message, named by its token (the delivery tag)."""

    __slots__ = ("consumer", "delivery", "queue", "stored", "token", "until")

    def __init__(self, queue: Queue, stored: StoredMessage, until: float, consumer: Consumer | None) -> None:
        self.token = uuid.uuid4()
        self.queue = queue
        self.stored = stored
        self.until = until
        self.consumer = consumer
        self.delivery: Any = None  # the proton delivery, set by the server


class SessionState:
    """A session of a session-enabled entity."""

    __slots__ = ("holder", "locked_until", "state")

    def __init__(self) -> None:
        self.holder: Consumer | None = None
        self.locked_until = 0.0
        self.state: bytes | None = None


def copy_message(message: Message) -> Message:
    """An independent copy of a proton message."""
    copy = Message()
    copy.decode(message.encode())
    return copy


def session_of(message: Message) -> str | None:
    """The session id (AMQP group-id) of ``message``."""
    group = message.group_id
    return None if group is None else str(group)


def scheduled_time(message: Message) -> float | None:
    """The scheduled enqueue time (epoch seconds) a sender put on ``message``, if any."""
    annotations = message.annotations
    if not annotations:
        return None
    value = annotations.get(X_OPT_SCHEDULED)
    if value is None:
        value = annotations.get("x-opt-scheduled-enqueue-time")
    if value is None:
        return None
    if hasattr(value, "timestamp"):
        return float(value.timestamp())
    return float(value) / 1000.0


class Queue:
    """A queue, a subscription or a dead-letter queue: messages that consumers take and settle."""

    def __init__(
        self, namespace: Namespace, path: str, options: EntityOptions, *, dead_letter: bool = False
    ) -> None:
        self.namespace = namespace
        self.path = path
        self.options = options
        self.is_dead_letter = dead_letter
        self.messages: dict[int, StoredMessage] = {}
        self.available: list[int] = []  # heap of sequence numbers (entities without sessions)
        self.by_session: dict[str, list[int]] = {}  # session id -> heap of sequence numbers
        self.sessions: dict[str, SessionState] = {}
        self.locks: dict[uuid.UUID, Lock] = {}
        self.lock_heap: list[tuple[float, int, uuid.UUID]] = []
        self.scheduled: list[tuple[float, int]] = []
        self.consumers: list[Consumer] = []
        self.waiting: list[tuple[float, Callable[[str | None], None]]] = []  # next-available session attaches
        self._rotation = 0
        self._seq = itertools.count(1)
        self._ticket = itertools.count()
        self.dead_letter_queue: Queue | None = (
            None
            if dead_letter
            else Queue(namespace, path + "/$DeadLetterQueue", replace(options), dead_letter=True)
        )

    def __repr__(self) -> str:
        return f"<Queue {self.path} {len(self.messages)} messages>"

    # -- counting, for tests ------------------------------------------------------------------
    def count(self, state: str | None = None) -> int:
        """Messages in the entity (all, or those in ``state``: active, deferred, scheduled, locked)."""
        if state is None:
            return len(self.messages)
        if state == "locked":
            return len(self.locks)
        if state == ACTIVE:
            return sum(1 for m in self.messages.values() if m.state == ACTIVE and m.lock is None)
        return sum(1 for m in self.messages.values() if m.state == state)

    # -- arrival --------------------------------------------------------------------------------
    def next_seq(self) -> int:
        """A new sequence number of this entity."""
        return next(self._seq)

    def add(self, message: Message, seq: int | None = None, when: float | None = None) -> StoredMessage:
        """Store ``message``: available now, or at ``when`` (epoch seconds) if that is in the future."""
        now = time.time()
        session_id = session_of(message)
        if self.options.requires_session and session_id is None and not self.is_dead_letter:
            raise EntityError(
                "amqp:invalid-field",
                f"The SessionId was not set on a message, and it cannot be sent to the entity {self.path!r}. "
                "Entities that have session support enabled can only receive messages that have the "
                "SessionId set.",
            )
        stored = StoredMessage(self.next_seq() if seq is None else seq, message, now, session_id)
        self.messages[stored.seq] = stored
        if when is not None and when > now:
            stored.state = SCHEDULED
            stored.scheduled_for = when
            heapq.heappush(self.scheduled, (when, stored.seq))
        else:
            self._make_available(stored)
            self.dispatch()
        return stored

    def _make_available(self, stored: StoredMessage) -> None:
        stored.state = ACTIVE
        stored.lock = None
        if self.options.requires_session and stored.session_id is not None:
            heap = self.by_session.get(stored.session_id)
            if heap is None:
                heap = self.by_session[stored.session_id] = []
            heapq.heappush(heap, stored.seq)
            if self.waiting:
                self._wake_waiting()
        else:
            heapq.heappush(self.available, stored.seq)

    def cancel_scheduled(self, seq: int) -> None:
        """Drop a scheduled message (unknown or already enqueued ones are ignored, as on Service Bus)."""
        stored = self.messages.get(seq)
        if stored is not None and stored.state == SCHEDULED:
            del self.messages[seq]

    # -- delivery -------------------------------------------------------------------------------
    def attach(self, consumer: Consumer) -> None:
        """Start delivering to ``consumer`` as it gives credit."""
        self.consumers.append(consumer)

    def detach(self, consumer: Consumer) -> None:
        """Stop delivering to ``consumer``; its session (if any) is released with its locked messages."""
        if consumer in self.consumers:
            self.consumers.remove(consumer)
        session_id = consumer.session_id
        if session_id is not None:
            session = self.sessions.get(session_id)
            if session is not None and session.holder is consumer:
                self._release_session(session_id, session)
            self.dispatch()

    def _release_session(self, session_id: str, session: SessionState) -> None:
        session.holder = None
        for lock in [lk for lk in self.locks.values() if lk.stored.session_id == session_id]:
            del self.locks[lock.token]
            self._make_available(lock.stored)
        if self.waiting:
            self._wake_waiting()

    def _take(self, consumer: Consumer) -> StoredMessage | None:
        session_id = consumer.session_id
        heap = self.available if session_id is None else self.by_session.get(session_id)
        messages = self.messages
        while heap:
            seq = heapq.heappop(heap)
            stored = messages.get(seq)
            if stored is not None and stored.state == ACTIVE and stored.lock is None:
                return stored
        return None

    def dispatch(self) -> None:
        """Deliver available messages to consumers with credit, round robin."""
        consumers = self.consumers
        if not consumers:
            return
        progress = True
        while progress:
            progress = False
            count = len(consumers)
            for step in range(count):
                consumer = consumers[(self._rotation + step) % count]
                if consumer.credit() <= 0:
                    continue
                stored = self._take(consumer)
                if stored is None:
                    continue
                self._rotation = (self._rotation + step + 1) % max(1, len(consumers))
                self._deliver(consumer, stored)
                progress = True
                break

    def _deliver(self, consumer: Consumer, stored: StoredMessage) -> None:
        if consumer.receive_and_delete:
            del self.messages[stored.seq]
            consumer.deliver(stored, None)
            return
        if consumer.session_id is not None:
            until = self.sessions[consumer.session_id].locked_until
            lock = Lock(self, stored, until, consumer)
        else:
            lock = Lock(self, stored, time.time() + self.options.lock_duration, consumer)
            heapq.heappush(self.lock_heap, (lock.until, next(self._ticket), lock.token))
        stored.lock = lock
        self.locks[lock.token] = lock
        consumer.deliver(stored, lock)

    # -- settlement -----------------------------------------------------------------------------
    def _locked(self, token: uuid.UUID) -> Lock:
        lock = self.locks.get(token)
        if lock is None:
            raise lock_lost(token)
        return lock

    def complete(self, token: uuid.UUID) -> None:
        """Remove the locked message for good."""
        lock = self._locked(token)
        del self.locks[token]
        self.messages.pop(lock.stored.seq, None)

    def release(self, token: uuid.UUID) -> None:
        """Unlock without counting a delivery (the client never handed the message out)."""
        lock = self.locks.pop(token, None)
        if lock is None:
            return
        self._unlock(lock.stored, count=False)
        self.dispatch()

    def abandon(self, token: uuid.UUID) -> None:
        """Unlock and count a failed delivery (dead-letter once ``max_delivery_count`` is reached)."""
        lock = self._locked(token)
        del self.locks[token]
        self._unlock(lock.stored, count=True)
        self.dispatch()

    def _unlock(self, stored: StoredMessage, *, count: bool) -> None:
        stored.lock = None
        if stored.state == DEFERRED:
            if count:
                stored.delivery_count += 1
            return
        if count:
            stored.delivery_count += 1
            limit = self.options.max_delivery_count
            if not self.is_dead_letter and stored.delivery_count >= limit:
                self._dead_letter(
                    stored,
                    "MaxDeliveryCountExceeded",
                    f"Message could not be consumed after {limit} delivery attempts.",
                )
                return
        self._make_available(stored)

    def defer(self, token: uuid.UUID) -> None:
        """Park the message: only receive-by-sequence-number returns it."""
        lock = self._locked(token)
        del self.locks[token]
        lock.stored.lock = None
        lock.stored.state = DEFERRED

    def dead_letter(self, token: uuid.UUID, reason: str | None, description: str | None) -> None:
        """Move the locked message to the dead-letter queue."""
        lock = self._locked(token)
        del self.locks[token]
        self._dead_letter(lock.stored, reason, description)

    def _dead_letter(self, stored: StoredMessage, reason: str | None, description: str | None) -> None:
        self.messages.pop(stored.seq, None)
        stored.lock = None
        target = self.dead_letter_queue
        if target is None:  # a dead-letter queue has no dead-letter queue of its own
            return
        message = copy_message(stored.message)
        properties = dict(message.properties or {})
        if reason is not None:
            properties["DeadLetterReason"] = reason
        if description is not None:
            properties["DeadLetterErrorDescription"] = description
        message.properties = properties
        forward = self.options.forward_dead_lettered_messages_to
        if forward is not None:
            annotations = dict(message.annotations or {})
            annotations[X_OPT_DEAD_LETTER_SOURCE] = self.path
            message.annotations = annotations
            self.namespace.target(forward).add(message)
            return
        copy = StoredMessage(stored.seq, message, stored.enqueued, stored.session_id)
        copy.delivery_count = stored.delivery_count
        target.messages[copy.seq] = copy
        target._make_available(copy)
        target.dispatch()

    def renew(self, token: uuid.UUID) -> float:
        """Extend a message lock by ``lock_duration``; the new expiry (epoch seconds)."""
        lock = self._locked(token)
        if lock.consumer is not None and lock.consumer.session_id is not None:
            raise EntityError("com.microsoft:session-lock-lost", "renew the session lock instead")
        lock.until = time.time() + self.options.lock_duration
        heapq.heappush(self.lock_heap, (lock.until, next(self._ticket), token))
        return lock.until

    # -- deferred messages ----------------------------------------------------------------------
    def receive_deferred(self, seqs: list[int], session_id: str | None) -> list[tuple[StoredMessage, Lock]]:
        """Lock deferred messages by sequence number for a management-link receiver."""
        out = []
        for seq in seqs:
            stored = self.messages.get(seq)
            if stored is None or stored.state != DEFERRED:
                raise EntityError(
                    "com.microsoft:message-not-found", f"Failed to lock one or more specified messages: {seq}"
                )
            if stored.lock is not None:
                raise EntityError("com.microsoft:message-lock-lost", f"message {seq} is already locked")
            lock = Lock(self, stored, time.time() + self.options.lock_duration, None)
            heapq.heappush(self.lock_heap, (lock.until, next(self._ticket), lock.token))
            stored.lock = lock
            self.locks[lock.token] = lock
            out.append((stored, lock))
        return out

    # -- sessions -------------------------------------------------------------------------------
    def session(self, session_id: str) -> SessionState:
        """The state of ``session_id`` (created empty on first use)."""
        session = self.sessions.get(session_id)
        if session is None:
            session = self.sessions[session_id] = SessionState()
        return session

    def lock_session(self, session_id: str | None, consumer: Consumer) -> str | None:
        """Give ``consumer`` the session (None: the next one with messages); None if none is free."""
        if session_id is None:
            session_id = self._free_session()
            if session_id is None:
                return None
        session = self.session(session_id)
        if session.holder is not None and session.holder is not consumer:
            raise EntityError(
                "com.microsoft:session-cannot-be-locked",
                f"The requested session '{session_id}' cannot be accepted. "
                "It may be locked by another receiver.",
            )
        session.holder = consumer
        session.locked_until = time.time() + self.options.lock_duration
        return session_id

    def _free_session(self) -> str | None:
        best: tuple[int, str] | None = None
        for session_id, heap in self.by_session.items():
            session = self.sessions.get(session_id)
            if session is not None and session.holder is not None:
                continue
            while heap:
                stored = self.messages.get(heap[0])
                if stored is not None and stored.state == ACTIVE and stored.lock is None:
                    break
                heapq.heappop(heap)
            if heap and (best is None or heap[0] < best[0]):
                best = (heap[0], session_id)
        return None if best is None else best[1]

    def wait_for_session(self, deadline: float, callback: Callable[[str | None], None]) -> None:
        """Call ``callback(session_id)`` once a session is free (``callback(None)`` at ``deadline``)."""
        self.waiting.append((deadline, callback))

    def _wake_waiting(self) -> None:
        while self.waiting:
            session_id = self._free_session()
            if session_id is None:
                return
            _, callback = self.waiting.pop(0)
            callback(session_id)

    def renew_session(self, session_id: str, consumer: Consumer | None = None) -> float:
        """Extend the session lock; the new expiry (epoch seconds)."""
        session = self.sessions.get(session_id)
        if session is None or session.holder is None:
            raise EntityError(
                "com.microsoft:session-lock-lost", f"the lock on session {session_id!r} was lost"
            )
        session.locked_until = time.time() + self.options.lock_duration
        for lock in self.locks.values():
            if lock.stored.session_id == session_id:
                lock.until = session.locked_until
        return session.locked_until

    def session_ids(self) -> list[str]:
        """Sessions with messages or state."""
        with_messages = {m.session_id for m in self.messages.values() if m.session_id is not None}
        with_state = {sid for sid, s in self.sessions.items() if s.state is not None}
        return sorted(with_messages | with_state)

    # -- time -----------------------------------------------------------------------------------
    def tick(self, now: float) -> None:
        """Expire locks and session locks, enqueue due scheduled messages, time out session waits."""
        heap = self.lock_heap
        changed = False
        while heap and heap[0][0] <= now:
            _, _, token = heapq.heappop(heap)
            lock = self.locks.get(token)
            if lock is None or lock.until > now:
                continue
            del self.locks[token]
            self._unlock(lock.stored, count=True)
            changed = True
        scheduled = self.scheduled
        while scheduled and scheduled[0][0] <= now:
            _, seq = heapq.heappop(scheduled)
            stored = self.messages.get(seq)
            if stored is not None and stored.state == SCHEDULED:
                self._make_available(stored)
                changed = True
        for session_id, session in self.sessions.items():
            holder = session.holder
            if holder is not None and session.locked_until <= now:
                self._release_session(session_id, session)
                holder.session_lost(f"the lock on session {session_id!r} expired")
                changed = True
        if self.waiting:
            expired = [w for w in self.waiting if w[0] <= now]
            if expired:
                self.waiting = [w for w in self.waiting if w[0] > now]
                for _, callback in expired:
                    callback(None)
        if changed:
            self.dispatch()

    def peek(self, from_seq: int, count: int, session_id: str | None) -> list[StoredMessage]:
        """Up to ``count`` messages from sequence number ``from_seq`` on, in order, without locking."""
        out = []
        for seq in sorted(self.messages):
            if seq < from_seq:
                continue
            stored = self.messages[seq]
            if session_id is not None and stored.session_id != session_id:
                continue
            out.append(stored)
            if len(out) >= count:
                break
        return out


class Topic:
    """A topic: what is sent to it is copied to every subscription."""

    def __init__(self, namespace: Namespace, path: str) -> None:
        self.namespace = namespace
        self.path = path
        self.subscriptions: dict[str, Queue] = {}
        self.scheduled: dict[int, tuple[float, Message]] = {}
        self.scheduled_heap: list[tuple[float, int]] = []
        self._seq = itertools.count(1)

    def __repr__(self) -> str:
        return f"<Topic {self.path} {sorted(self.subscriptions)}>"

    def subscription(self, name: str, options: EntityOptions | None = None, *, create: bool = True) -> Queue:
        """The subscription ``name`` (created with ``options`` when missing and ``create``)."""
        key = name.lower()
        queue = self.subscriptions.get(key)
        if queue is None:
            if not create:
                raise EntityError(
                    "amqp:not-found",
                    f"The messaging entity '{self.path}/Subscriptions/{name}' could not be found.",
                )
            queue = Queue(
                self.namespace, f"{self.path}/Subscriptions/{name}", options or self.namespace.defaults
            )
            self.subscriptions[key] = queue
        return queue

    def add(self, message: Message, when: float | None = None) -> int:
        """Publish ``message`` to every subscription (now, or at ``when``); its sequence number."""
        seq = next(self._seq)
        if when is not None and when > time.time():
            self.scheduled[seq] = (when, message)
            heapq.heappush(self.scheduled_heap, (when, seq))
            return seq
        self._fan_out(seq, message)
        return seq

    def _fan_out(self, seq: int, message: Message) -> None:
        subscriptions = list(self.subscriptions.values())
        for i, queue in enumerate(subscriptions):
            copy = message if i == len(subscriptions) - 1 else copy_message(message)
            queue.add(copy, seq=seq)

    def cancel_scheduled(self, seq: int) -> None:
        """Drop a scheduled message."""
        self.scheduled.pop(seq, None)

    def tick(self, now: float) -> None:
        """Publish due scheduled messages, then tick every subscription."""
        heap = self.scheduled_heap
        while heap and heap[0][0] <= now:
            _, seq = heapq.heappop(heap)
            entry = self.scheduled.pop(seq, None)
            if entry is not None:
                self._fan_out(seq, entry[1])
        for queue in self.subscriptions.values():
            queue.tick(now)
            if queue.dead_letter_queue is not None:
                queue.dead_letter_queue.tick(now)


class Namespace:
    """Every entity of the fake namespace, by case-insensitive path."""

    def __init__(self, defaults: EntityOptions | None = None, *, auto_create: bool = True) -> None:
        self.defaults = defaults or EntityOptions()
        self.auto_create = auto_create
        self.queues: dict[str, Queue] = {}
        self.topics: dict[str, Topic] = {}

    # -- the fixture API --------------------------------------------------------------------------
    def create_queue(self, name: str, options: EntityOptions | None = None) -> Queue:
        """Create queue ``name`` (an existing one gets ``options``)."""
        key = name.lower()
        if key in self.topics:
            raise EntityError("com.microsoft:entity-already-exists", f"{name!r} is a topic")
        queue = self.queues.get(key)
        if queue is None:
            queue = self.queues[key] = Queue(self, name, options or self.defaults)
        elif options is not None:
            self._set_options(queue, options)
        return queue

    def create_topic(self, name: str) -> Topic:
        """Create topic ``name`` (no-op if it exists)."""
        key = name.lower()
        if key in self.queues:
            raise EntityError("com.microsoft:entity-already-exists", f"{name!r} is a queue")
        topic = self.topics.get(key)
        if topic is None:
            topic = self.topics[key] = Topic(self, name)
        return topic

    def create_subscription(self, topic: str, name: str, options: EntityOptions | None = None) -> Queue:
        """Create subscription ``name`` of ``topic`` (the topic too, when missing)."""
        queue = self.create_topic(topic).subscription(name, options)
        if options is not None:
            self._set_options(queue, options)
        return queue

    @staticmethod
    def _set_options(queue: Queue, options: EntityOptions) -> None:
        queue.options = options
        if queue.dead_letter_queue is not None:
            queue.dead_letter_queue.options = options

    def update(self, path: str, **changes: Any) -> Queue:
        """Change options (``lock_duration=``, ``max_delivery_count=``, ...) of the queue or subscription."""
        queue = self.queue(path)
        self._set_options(queue, replace(queue.options, **changes))
        return queue

    # -- resolution -------------------------------------------------------------------------------
    def queue(self, path: str, *, create: bool = False) -> Queue:
        """The queue, subscription or dead-letter queue at ``path``."""
        lowered = path.lower().strip("/")
        dead_letter = lowered.endswith(DEAD_LETTER_SUFFIX)
        if dead_letter:
            path = path.strip("/")[: -len(DEAD_LETTER_SUFFIX)]
            lowered = lowered[: -len(DEAD_LETTER_SUFFIX)]
        if SUBSCRIPTIONS in lowered:
            index = lowered.index(SUBSCRIPTIONS)
            topic_name, sub_name = path.strip("/")[:index], path.strip("/")[index + len(SUBSCRIPTIONS) :]
            topic = self.topics.get(topic_name.lower())
            if topic is None:
                if not (create and self.auto_create) or topic_name.lower() in self.queues:
                    raise self._not_found(path)
                topic = self.create_topic(topic_name)
            queue = topic.subscription(sub_name, create=create and self.auto_create)
        else:
            found = self.queues.get(lowered)
            if found is None:
                if not (create and self.auto_create) or lowered in self.topics:
                    raise self._not_found(path)
                found = self.create_queue(path.strip("/"))
            queue = found
        if dead_letter:
            assert queue.dead_letter_queue is not None
            return queue.dead_letter_queue
        return queue

    def target(self, path: str) -> Queue | Topic:
        """Where a sender's messages go: a queue or a topic (a queue is created if allowed)."""
        lowered = path.lower().strip("/")
        topic = self.topics.get(lowered)
        if topic is not None:
            return topic
        if lowered.endswith(DEAD_LETTER_SUFFIX) or SUBSCRIPTIONS in lowered:
            raise EntityError("amqp:not-allowed", f"cannot send to {path!r}")
        return self.queue(path, create=True)

    @staticmethod
    def _not_found(path: str) -> EntityError:
        return EntityError("amqp:not-found", f"The messaging entity '{path}' could not be found.")

    def all_queues(self) -> Iterator[Queue]:
        """Every queue and subscription (not the dead-letter queues)."""
        yield from self.queues.values()
        for topic in self.topics.values():
            yield from topic.subscriptions.values()

    def tick(self, now: float) -> None:
        """Advance time for every entity."""
        for queue in self.queues.values():
            queue.tick(now)
            if queue.dead_letter_queue is not None:
                queue.dead_letter_queue.tick(now)
        for topic in self.topics.values():
            topic.tick(now)
