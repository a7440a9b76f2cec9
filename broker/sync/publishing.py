"""Blocking publishers: thread-safe hand-over queues drained in batches by one task on the loop thread.

Each topic handle has a queue; a publish from any thread appends its message there, then appends
the topic handle to the publisher's queue of *tokens* (one per message: which topic has the next
one) and, only when the drainer is idle, wakes the loop with one ``call_soon_threadsafe``. The
drainer takes up to ``max_batch`` tokens at a time, as many messages from each topic's queue, and
sends each topic's share with the async topic's ``batch_publish`` (``send_checked``): a burst of
publishes costs one loop round trip per batch, not per message. Where the async driver counts its
sends still handing messages to the client (:class:`~broker.driver.publishing.HandOver`), up to
``MAX_SENDS`` shares are in flight at once, each started once every earlier one holds all its
messages in the client: order is kept and the confirmations' round trips overlap. Elsewhere one
batch is sent at a time.

The common call, ``publish_nowait`` of a well-formed message without ``on_delivery``, is a few
type checks and two ``deque.append`` calls (each atomic under the GIL): no lock, no closure, no
counter written by the caller and no object made per message (a tuple per queued message would
make the cyclic garbage collector walk the queue again and again); its room check is one
comparison with ``_room`` (``max_pending`` less what the drainer holds and the batches' extra
messages; 0 once closed, or in a forked child), which the other side keeps under the lock. Every
message is checked where it is handed over, so the drainer sends through the async topic's
``send_checked`` and does not walk its batches again. The message goes in before its
token, so the drainer never takes a token whose message is missing. What is pending is the number
of tokens plus what the drainer holds (``_in_flight``, written by the loop thread under the lock),
so a flush or a close waits for exactly what was handed over before it. Every other publish (a
callback, a future, a batch, a full queue) takes the lock and counts its extra messages there.

The drainer goes idle in two steps, ``_idle = True`` and then one more look at the tokens, while a
caller appends first and looks at ``_idle`` after: whichever order the two threads take, either
the drainer sees the message or the caller sees the drainer idle and wakes it (a wake that finds
a drainer running is ignored on the loop thread).

The queue is bounded by ``max_pending`` messages (queued and in flight); a publish that finds it
full waits for room up to its timeout, then raises :class:`~broker.errors.Timeout`. Threads that
pass the check at the same moment may each add their message: the bound is exceeded by at most
one message per publishing thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import Counter, deque
from collections.abc import Callable, Mapping, Sequence
from itertools import repeat, starmap
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from broker.backend import Backend
from broker.driver.clock import clock
from broker.driver.forwarding import Forwarded
from broker.driver.outbound import check_outbound, is_plain
from broker.driver.publishing import DriverPublisher, DriverTopic, HandOver
from broker.errors import ClosedError, PublishError, Timeout
from broker.interfaces import Publisher, Topic
from broker.message import OutboundMessage
from broker.sync import portal as _portal
from broker.sync.portal import Closing, _get_running_loop, check_not_in_loop, generation

if TYPE_CHECKING:
    from broker.sync.backend import SyncBackend
    from broker.typed.binding import Binding

__all__ = ["DeliveryCallback", "SyncPublisher", "SyncTopic", "SyncTypedTopic"]

T = TypeVar("T")

#: ``on_delivery(error, message)``: ``error`` is None once the broker has ``message``.
DeliveryCallback = Callable[[BaseException | None, OutboundMessage], object]

log = logging.getLogger("broker.sync")

#: Batch sends a publisher keeps in flight at once where the async driver lets a send start
#: while earlier ones await their confirmations without overtaking them (see ``_hand_over``).
MAX_SENDS = 4

#: Loop passes a share sent alongside is given to enter its driver's hand-over; one that has not
#: by then (it awaits something first) is waited for before the next share starts.
_HAND_OVER_STEPS = 3

# One item of a topic's queue: a message (the common case), or (a message or a tuple of messages,
# callback(error) or None) for a publish with a callback or a batch.
_Item = Any


class SyncPublisher(Closing):
    """A blocking publisher; :meth:`topic` hands out cheap, thread-safe topic handles.

    Any number of threads may publish through one publisher at once. Messages of one topic are
    sent in the order they were handed over.
    """

    def __init__(
        self,
        backend: SyncBackend,
        *,
        timeout: float,
        close_timeout: float,
        max_pending: int = 100_000,
        max_batch: int = 10_000,
    ) -> None:
        self._backend = backend
        #: Default timeout (seconds) of a waiting publish and of :meth:`flush`.
        self.timeout = timeout
        #: How long :meth:`close` (and interpreter exit) waits for pending messages.
        self.close_timeout = close_timeout
        self._max_pending = max_pending
        self._max_batch = max_batch
        self._closed = False
        self._topics: dict[str, SyncTopic] = {}
        self._gen = -1
        self._open()

    def _open(self) -> None:
        """(Re-)open the async publisher on this generation's loop, with a fresh hand-over state."""
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._tokens: deque[SyncTopic] = deque()  # one per queued item: its topic, in hand-over order
        for handle in self._topics.values():
            handle._queue = deque()  # a forked child: the parent's queued messages are the parent's
        self._extra = 0  # queued messages beyond one per item (batches), under the lock
        self._slow = 0  # queued items with a callback or a batch, under the lock
        self._in_flight = 0  # messages the drainer took and has not finished; loop thread, under the lock
        self._room = 0  # tokens the lock-free publish may still queue (see _recount), under the lock
        self._recount()
        self._idle = True  # no drainer running or scheduled (see the module's docstring)
        self._draining = False  # a drainer task runs; the loop thread's own
        self._failed = 0  # messages without a callback whose publish failed since the last flush
        self._first_error: BaseException | None = None
        self._async_topics: dict[str, Topic] = {}
        backend = self._backend._async_backend()  # here: in a forked child it re-connects first
        self._async: Publisher = self._backend._call(_make_publisher, backend, what="publisher()")
        self._portal = _portal.portal()
        _portal.flush_at_exit(self)
        self._gen = generation()  # last: another thread uses the state only once this is current

    def __repr__(self) -> str:
        return f"<SyncPublisher of {self._backend!r}>"

    @property
    def pending(self) -> int:
        """Messages handed over and not yet confirmed by the broker (or failed)."""
        return self._pending

    @property
    def _pending(self) -> int:
        # Exact under the lock; without it a snapshot that may count a message being taken twice.
        return len(self._tokens) + self._extra + self._in_flight

    def topic(self, name: str) -> SyncTopic:
        """The handle publishing to topic ``name``."""
        handle = self._topics.get(name)
        if handle is None:
            self._check_open()
            handle = self._topics.setdefault(name, SyncTopic(self, name))
        return handle

    def typed_topic(self, name: str, type: Binding[T] | type[T]) -> SyncTypedTopic[T]:
        """A handle publishing values of ``type`` to topic ``name`` (see :mod:`broker.typed`)."""
        from broker.typed.binding import ensure_binding

        return SyncTypedTopic(self.topic(name), ensure_binding(type))

    def _recount(self) -> None:
        # Under the lock, after a change of _extra, _in_flight or _closed: the lock-free publish
        # queues a message while len(_tokens) < _room, i.e. while fewer than max_pending are pending
        # (one comparison on the caller's hot path instead of three reads and two sums).
        self._room = 0 if self._closed else self._max_pending - self._extra - self._in_flight

    def _forked(self) -> None:
        # In a forked child (from the portal's fork handler, the child's only thread): the
        # lock-free publish stops passing, so the next publish takes the slow path, which re-opens
        # the publisher for the child (its generation differs) before it queues anything.
        self._room = 0

    def _check_open(self) -> None:
        if self._closed or self._backend.closed:
            raise ClosedError("the blocking publisher is closed")

    def _put(
        self,
        handle: SyncTopic,
        item: Any,
        count: int,
        callback: Callable[[BaseException | None], object] | None,
        timeout: float | None,
    ) -> None:
        if self._gen != generation():
            check_not_in_loop("publish")
            with _portal.reopen_lock():
                if self._gen != generation():
                    _portal.abandon(dict(self.__dict__))  # never freed here: see portal.abandon
                    self._open()  # a forked child: fresh loop and connection; the parent's queue is not ours
        with self._lock:
            if self._closed or self._backend.closed:
                raise ClosedError("the blocking publisher is closed")
            if self._pending + count > self._max_pending and self._pending:
                limit = self.timeout if timeout is None else timeout
                if not self._cond.wait_for(
                    lambda: self._pending + count <= self._max_pending or not self._pending, limit
                ):
                    raise Timeout(
                        f"the publisher's queue stayed full ({self._pending} messages pending) for {limit} s"
                    )
                if self._closed:
                    raise ClosedError("the blocking publisher is closed")
            if callback is None and type(item) is not tuple:
                handle._queue.append(item)
            else:
                handle._queue.append((item, callback))
                self._slow += 1
                self._extra += count - 1
                self._recount()
            self._tokens.append(handle)
        self._wake()

    def _wake(self) -> None:
        """Start the drainer unless it runs (called after an append: see the module's docstring)."""
        if self._idle:
            self._idle = False
            self._portal.call_soon(self._start_drain)

    # -- the loop side -------------------------------------------------------------------
    def _start_drain(self) -> None:
        if not self._draining:
            self._draining = True
            asyncio.get_running_loop().create_task(self._drain())

    async def _drain(self) -> None:
        batch: list[tuple[SyncTopic, list[_Item]]] = []
        sends: set[asyncio.Task[None]] = set()  # shares sent alongside (see _hand_over)
        try:
            while True:
                if sends and (len(sends) >= MAX_SENDS or not self._tokens):
                    _, sends = await asyncio.wait(sends, return_when=asyncio.FIRST_COMPLETED)
                    continue
                with self._lock:
                    tokens = self._tokens
                    if not tokens:
                        self._idle = True
                        if not tokens:  # a caller appending from now on sees _idle and wakes a new drainer
                            self._draining = False
                            self._cond.notify_all()
                            return
                        self._idle = False
                    size = take = min(len(tokens), self._max_batch)
                    owners = _pop_left(tokens, take)
                    first = owners[0]
                    if owners.count(first) == take:  # one topic (the common case): no Counter
                        batch = [(first, _pop_left(first._queue, take))]
                    else:  # first-seen order; each topic's messages keep theirs
                        batch = [
                            (handle, _pop_left(handle._queue, count))
                            for handle, count in Counter(owners).items()
                        ]
                    plain = not self._slow
                    if not plain:
                        slow = [item for _, items in batch for item in items if type(item) is tuple]
                        self._slow -= len(slow)
                        extra = sum(len(item[0]) - 1 for item in slow if type(item[0]) is tuple)
                        self._extra -= extra
                        size += extra
                        plain = not slow
                    self._in_flight += size
                    self._recount()
                hand_over = self._hand_over()
                if hand_over is None:  # one batch at a time: a later send could overtake this one
                    if sends:
                        await asyncio.wait(sends)
                        sends = set()
                    while batch:
                        handle, items = batch[0]
                        await self._send(handle.name, items, plain)  # a cancelled one fails its messages
                        del batch[0]
                        count = len(items) if plain else sum(_count(item) for item in items)
                        with self._lock:
                            self._in_flight -= count
                            self._recount()
                            self._cond.notify_all()
                        task = asyncio.current_task()
                        if task is not None and task.cancelling():
                            raise asyncio.CancelledError  # the loop is going away: fail the rest below
                else:
                    while batch:
                        await hand_over.wait()  # every send started before holds all its messages
                        handle, items = batch[0]
                        count = len(items) if plain else sum(_count(item) for item in items)
                        share = self._share(handle.name, items, plain, count)
                        task = asyncio.get_running_loop().create_task(share)
                        sends.add(task)
                        del batch[0]
                        for _ in range(_HAND_OVER_STEPS):  # its first steps: into the driver's hand-over
                            await asyncio.sleep(0)
                            if hand_over.last is task or task.done():
                                break
                        else:  # it waits for something before handing over: nothing may start before it
                            await asyncio.wait({task})
                batch = []
        except BaseException as exc:  # the loop is going away: fail what is left, never hang a flush
            for task in sends:
                task.cancel()  # each fails its own messages (see _share)
            self._fail_all(batch, exc)
            raise

    def _hand_over(self) -> HandOver | None:
        """The async driver's hand-over count when batches may be in flight alongside, else None.

        Only a driver that offers one (its sends hand every message to the client before waiting
        for confirmations) under a publisher without send middleware (which may wait before the
        send) lets a batch start while an earlier one awaits its confirmations: it starts once
        every earlier send holds all its messages in the client, so messages keep their order.
        """
        publisher = self._async
        if isinstance(publisher, DriverPublisher) and not publisher.middleware:
            hand_over = getattr(publisher.driver, "hand_over", None)
            if isinstance(hand_over, HandOver):
                return hand_over
        return None

    async def _share(self, name: str, items: list[_Item], plain: bool, count: int) -> None:
        """:meth:`_send` of one topic's share of a batch sent alongside others; then it is no
        longer in flight (a cancelled send fails its messages in :meth:`_send`)."""
        try:
            await self._send(name, items, plain)
        finally:
            with self._lock:
                self._in_flight -= count
                self._recount()
                self._cond.notify_all()

    def _fail_all(self, batch: list[tuple[SyncTopic, list[_Item]]], cause: BaseException) -> None:
        """Fail the batch in hand and everything queued: the drainer cannot send them any more."""
        error = ClosedError("the blocking publisher's loop stopped before the broker had the message")
        error.__cause__ = cause
        with self._lock:
            taken = [item for _, items in batch for item in items]
            self._in_flight -= sum(_count(item) for item in taken)
            queued: list[_Item] = []
            tokens = list(self._tokens)
            self._tokens.clear()
            for handle, count in Counter(tokens).items():  # as many as have their token: see _drain
                pop = handle._queue.popleft
                queued.extend(pop() for _ in range(count))
            self._extra = self._slow = 0
            self._recount()
            self._idle = True
            self._draining = False
            lost = [*taken, *queued]
            silent = sum(_count(item) for item in lost if type(item) is not tuple or item[1] is None)
            self._failed += silent
            if silent and self._first_error is None:
                self._first_error = error
            self._cond.notify_all()
        for item in lost:
            if type(item) is tuple and item[1] is not None:
                try:
                    item[1](error)
                except Exception:  # a callback already told (the send failed half-way)
                    log.debug("a delivery callback raised", exc_info=True)

    async def _send(self, name: str, items: list[_Item], plain: bool) -> None:
        """``batch_publish`` of ``items``' messages to topic ``name``; then their callbacks, or the
        failure counted for :meth:`flush`. ``plain``: every item is one message without a callback."""
        if plain:
            messages: list[OutboundMessage] = items
        else:
            messages = []
            for item in items:
                if type(item) is not tuple:
                    messages.append(item)
                elif type(item[0]) is tuple:
                    messages.extend(item[0])
                else:
                    messages.append(item[0])
        error: BaseException | None = None
        try:
            topic = self._async_topics.get(name)
            if topic is None:
                topic = self._async_topics[name] = self._async.topic(name)
            if type(topic) is DriverTopic:  # every message was checked where it was handed over
                await topic.send_checked(tuple(messages), timeout=self.timeout)
            else:
                await topic.batch_publish(*messages, timeout=self.timeout)
        except asyncio.CancelledError:
            error = ClosedError("the blocking publisher's loop stopped before the broker had the message")
        except Exception as exc:
            error = exc
        if plain:
            if error is None:
                return
            silent = len(messages)
        else:
            silent = 0
            for item in items:
                if type(item) is not tuple or item[1] is None:
                    silent += _count(item)
                    continue
                try:
                    item[1](error)
                except Exception:
                    log.exception("an on_delivery callback raised")
        if error is not None and silent:
            with self._lock:
                self._failed += silent
                if self._first_error is None:
                    self._first_error = error
            log.warning("publishing %d messages to %r failed: %s", silent, name, error)

    # -- the caller side -----------------------------------------------------------------
    def flush(self, timeout: float | None = None) -> None:
        """Wait until every message handed over is confirmed by the broker (or failed).

        Raises :class:`~broker.errors.Timeout` when some are still pending after ``timeout``
        seconds, and :class:`~broker.errors.PublishError` (the first failure chained) when
        messages published without ``on_delivery`` failed since the last flush.
        """
        check_not_in_loop("flush()")
        if self._gen != generation():
            return  # a forked child has nothing of its own pending before its first publish
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            if not self._cond.wait_for(lambda: self._pending == 0, limit):
                raise Timeout(f"{self._pending} messages were still pending after {limit} s")
            failed, first = self._failed, self._first_error
            self._failed, self._first_error = 0, None
        if failed:
            raise PublishError(f"{failed} messages published without on_delivery failed") from first

    def _flush_at_exit(self, deadline: float) -> int:
        if self._gen != generation() or self._closed:
            return 0
        limit = max(0.0, min(self.close_timeout, deadline - clock.monotonic()))
        with self._lock:
            self._cond.wait_for(lambda: self._pending == 0, limit)
            return self._pending

    def close(self, timeout: float | None = None) -> None:
        """Flush pending messages (``close_timeout`` at most), then close the async publisher.

        Idempotent. Messages still pending when the time is up are counted in one log line.
        """
        if self._closed:
            return
        check_not_in_loop("close()")
        limit = self.close_timeout if timeout is None else timeout
        left = 0
        if self._gen == generation():
            with self._lock:
                self._cond.wait_for(lambda: self._pending == 0, limit)
                left = self._pending
                self._closed = True
                self._recount()
                self._cond.notify_all()
        self._closed = True
        self._room = 0
        _portal.forget_at_exit(self)
        if left:
            log.error("%d published messages were still pending when the publisher closed", left)
        if self._gen == generation() and not self._backend.closed:
            try:
                self._backend._call(self._async.close, timeout=limit, what="closing the publisher")
            except Timeout:  # its sends in flight outlived the limit: counted above, closed anyway
                log.warning("the publisher's sends in flight did not finish within %s s of close()", limit)


async def _make_publisher(backend: Backend) -> Publisher:
    return backend.publisher()


class SyncTopic:
    """A blocking handle on one topic of a :class:`SyncPublisher`; thread-safe."""

    __slots__ = ("_publisher", "_queue", "_valid", "name")

    def __init__(self, publisher: SyncPublisher, name: str) -> None:
        self._publisher = publisher
        # Messages handed over and not yet taken by the drainer (see the module's docstring).
        self._queue: deque[_Item] = deque()
        #: The topic's name.
        self.name = name
        # The attributes dict validated last and a copy of it: the same dict, still equal to the
        # copy, needs no new validation (one tuple, so threads replacing it never mix two).
        self._valid: tuple[object, dict[str, str]] = (None, {})

    def __repr__(self) -> str:
        return f"<SyncTopic {self.name!r}>"

    def publish_nowait(
        self,
        message: OutboundMessage,
        *,
        on_delivery: DeliveryCallback | None = None,
        timeout: float | None = None,
    ) -> None:
        """Hand ``message`` over and return at once; the loop thread sends it in a batch.

        ``on_delivery(error, message)`` runs on the loop thread once the broker has it (``error``
        None) or the publish failed: keep it short. Failures of messages without a callback are
        logged and raised by :meth:`SyncPublisher.flush`. Bad input raises
        :class:`~broker.errors.InvalidMessage` here. Returning at once needs room: when
        ``max_pending`` messages are pending (or the SDK's own queue is full), it waits for room up
        to ``timeout`` seconds (the publisher's default when None), then raises
        :class:`~broker.errors.Timeout` with the message not handed over. A message handed over
        is the publisher's until the broker has it: change neither it nor its attributes mapping
        meanwhile (it was checked as it was handed over).
        """
        # The common call (no callback, a well-formed message, room, this process's loop) is
        # checked inline and appended without a lock: it runs once per message.
        publisher = self._publisher
        if (
            on_delivery is None
            and type(message) is OutboundMessage
            and len(publisher._tokens) < publisher._room  # 0 when closed, or forked (see _forked)
            and _get_running_loop() is None
        ):
            key = message.key
            attributes = message.attributes
            if type(message.data) is bytes and (key is None or type(key) is str):
                if attributes:
                    valid = self._valid
                    if attributes is not valid[0] or attributes != valid[1]:
                        check_outbound(message)
                        if type(attributes) is dict:
                            self._valid = (attributes, attributes.copy())
                self._queue.append(message)  # before its token: see the module's docstring
                publisher._tokens.append(self)
                if publisher._idle:
                    publisher._wake()
                return
        if _get_running_loop() is not None:
            check_not_in_loop("publish_nowait()")
        if not is_plain(message):
            check_outbound(message)
        callback = None if on_delivery is None else _deliver(on_delivery, message)
        publisher._put(self, message, 1, callback, timeout)

    def publish_future(self, message: OutboundMessage) -> concurrent.futures.Future[None]:
        """Hand ``message`` over and return a future that completes when the broker has it."""
        check_not_in_loop("publish_future()")
        if not is_plain(message):
            check_outbound(message)
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._publisher._put(self, message, 1, _settle(future), None)
        return future

    def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        """Publish ``message`` and return when the broker has it (``timeout`` seconds at most)."""
        self._wait(message, 1, timeout)

    def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        """Publish ``messages`` and return when the broker has all of them."""
        if messages:
            self._wait(tuple(messages), len(messages), timeout)

    def _wait(self, payload: Any, count: int, timeout: float | None) -> None:
        check_not_in_loop("publish()")
        for message in payload if type(payload) is tuple else (payload,):
            if not is_plain(message):
                check_outbound(message)
        limit = self._publisher.timeout if timeout is None else timeout
        future: concurrent.futures.Future[None] = concurrent.futures.Future()
        self._publisher._put(self, payload, count, _settle(future), limit)
        try:
            future.result(limit)
        except concurrent.futures.TimeoutError:
            raise Timeout(f"publishing to {self.name!r} did not finish within {limit} s") from None


def _pop_left(queue: deque[Any], count: int) -> list[Any]:
    """The first ``count`` items of ``queue``, taken out: one C-level loop (``starmap`` calls
    ``popleft`` without a Python frame a call). Only the drainer pops, so they are there."""
    return list(starmap(queue.popleft, repeat((), count)))


def _count(item: _Item) -> int:
    """How many messages a queued item holds."""
    if type(item) is not tuple:
        return 1
    return len(item[0]) if type(item[0]) is tuple else 1


def _deliver(
    callback: DeliveryCallback, message: OutboundMessage
) -> Callable[[BaseException | None], object]:
    return lambda error: callback(error, message)


def _settle(future: concurrent.futures.Future[None]) -> Callable[[BaseException | None], object]:
    def settle(error: BaseException | None) -> None:
        if error is None:
            future.set_result(None)
        else:
            future.set_exception(error)

    return settle


class SyncTypedTopic(Generic[T]):
    """A blocking handle publishing values of ``T`` (encoded by a :mod:`broker.typed` binding)."""

    __slots__ = ("_typed", "topic")

    def __init__(self, topic: SyncTopic, binding: Binding[T]) -> None:
        from broker.typed.publishing import TypedTopic

        #: The untyped blocking topic underneath.
        self.topic = topic
        self._typed: TypedTopic[T] = TypedTopic(_NameOnly(topic.name), binding)  # type: ignore[arg-type]

    name: Forwarded[str] = Forwarded("topic", "The topic's name.")

    def message(
        self, value: T, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> OutboundMessage:
        """The message :meth:`publish` sends for ``value`` (``EncodeError`` when it cannot encode)."""
        return self._typed.message(value, key=key, attributes=attributes)

    def publish(
        self,
        value: T,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``value``; returns once the broker has it."""
        self.topic.publish(self.message(value, key=key, attributes=attributes), timeout=timeout)

    def publish_nowait(
        self,
        value: T,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        on_delivery: DeliveryCallback | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode ``value`` and hand it over without waiting (see :meth:`SyncTopic.publish_nowait`)."""
        self.topic.publish_nowait(
            self.message(value, key=key, attributes=attributes), on_delivery=on_delivery, timeout=timeout
        )

    def batch_publish(
        self,
        *values: T,
        keys: Sequence[str | None] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``values`` (with ``keys``, one per value, when given: else ConfigError)."""
        self.topic.batch_publish(*self._typed.messages(*values, keys=keys), timeout=timeout)


class _NameOnly:
    """The one thing :class:`~broker.typed.publishing.TypedTopic` needs to build messages: a name."""

    def __init__(self, name: str) -> None:
        self.name = name
