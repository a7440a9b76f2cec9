"""Blocking consumers: bounded read-ahead from the async iterators, batched settlement back.

A task on the loop thread pulls from the backend's own async iterator into a buffer of at most
``read_ahead`` items; the caller's thread takes from it under a lock (the loop is woken only
when the buffer had filled up and has drained to half). ``ack()``, ``nack()`` and ``commit()``
queue the settlement and return: one task on the loop settles what is queued in bulk
(:func:`broker.settle.ack_all`, :func:`~broker.settle.nack_all`,
:func:`~broker.settle.commit_highest_offsets`). A settlement that fails is logged and raised by
the consumer's next :meth:`flush` or :meth:`close` as :class:`~broker.errors.AckError`; pass
``wait=True`` to wait for one settlement and see its error at once.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import threading
from collections import deque
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from broker.driver.clock import clock
from broker.driver.forwarding import Forwarded
from broker.errors import AckError, ClosedError, Timeout
from broker.message import Message, Record
from broker.settle import ack_all, commit_highest_offsets, nack_all
from broker.sync import portal as _portal
from broker.sync.portal import Closing, check_not_in_loop, generation

if TYPE_CHECKING:
    from broker.sync.backend import SyncBackend

__all__ = ["SyncMessage", "SyncMessages", "SyncRecord", "SyncRecords"]

log = logging.getLogger("broker.sync")

W = TypeVar("W", "SyncMessage", "SyncRecord")

_ACK, _NACK, _COMMIT = 0, 1, 2


class _Failure:
    __slots__ = ("error",)

    def __init__(self, error: BaseException) -> None:
        self.error = error


class _Consumer(Closing, Generic[W]):
    """The shared machinery of :class:`SyncMessages` and :class:`SyncRecords`."""

    _what = "consumer"
    #: Whether the source is read with its ``next_batch`` where it has one.
    _pulls_batches = False
    #: The source's method that pulls one item (a batched source lacks it).
    _pull_name = "next_message"

    def __init__(
        self,
        backend: SyncBackend,
        opener: Callable[[], Any],
        *,
        read_ahead: int,
        timeout: float,
        close_timeout: float,
    ) -> None:
        if read_ahead < 1:
            from broker.errors import ConfigError

            raise ConfigError(f"read_ahead must be at least 1, got {read_ahead}")
        self._backend = backend
        self._opener = opener
        self._read_ahead = read_ahead
        #: Default timeout (seconds) of :meth:`flush` and of a settlement waited for.
        self.timeout = timeout
        #: How long :meth:`close` may take.
        self.close_timeout = close_timeout
        self._closed = False
        self._stopping = False
        self._gen = -1
        self._open()

    def _open(self) -> None:
        self._lock = threading.Lock()
        self._cond = threading.Condition(self._lock)
        self._buffer: deque[Any] = deque()
        self._paused = False  # the fetcher waits for room
        self._waiting = 0  # callers waiting for an item (the fetcher notifies only then)
        self._settle_queue: deque[tuple[int, Any, Any, Any]] = deque()
        self._settling = False
        self._unsettled = 0
        self._settle_errors: list[BaseException] = []
        #: Items the fetcher pulled after close() took its snapshot: nacked by the close.
        self._late: list[Any] = []
        self._fetch_task: asyncio.Task[None] | None = None
        self._portal = _portal.portal()
        self._backend._async_backend()  # here: in a forked child it re-connects first
        self._source: Any = self._backend._call(_opened, self._opener, what=f"opening the {self._what}")
        self._room: asyncio.Event | None = None
        self._fetcher: concurrent.futures.Future[None] = asyncio.run_coroutine_threadsafe(
            self._fetch(), self._portal.loop
        )
        _portal.flush_at_exit(self)
        self._gen = generation()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} of {self._backend!r}>"

    def __iter__(self) -> Iterator[W]:
        """Yield items until the consumer is closed (from another thread or a signal handler)."""
        while True:
            try:
                yield self._next(None)
            except ClosedError:
                return

    # -- the loop side -------------------------------------------------------------------
    async def _pull(self) -> Any:
        raise NotImplementedError

    async def _fetch(self) -> None:
        self._fetch_task = asyncio.current_task()
        self._room = asyncio.Event()
        read_ahead, cond, buffer = self._read_ahead, self._cond, self._buffer
        # A source that pulls in batches (a record iterator's ``next_batch``, up to its
        # ``batch_size``) is read a batch at a time whenever a whole batch fits: one await and one
        # hand-over per batch instead of per item, and the read-ahead bound still holds.
        # A source that only pulls batches (a blocking messages() consumer over the backend's
        # batched consumer) waits until a whole batch fits.
        source = self._source
        pull_batch = getattr(source, "next_batch", None) if self._pulls_batches else None
        batch_size = getattr(source, "batch_size", None)
        batches_only = pull_batch is not None and not hasattr(source, self._pull_name)
        if batches_only:
            need = batch_size if type(batch_size) is int and 1 <= batch_size <= read_ahead else read_ahead
        elif type(batch_size) is not int or batch_size < 2 or batch_size > read_ahead:
            pull_batch, need = None, 1
        else:
            need = 1
        try:
            while True:
                with cond:
                    room = read_ahead - len(buffer)
                    if room < need:
                        self._paused = True
                        self._room.clear()
                        wait = True
                    else:
                        wait = False
                if wait:
                    await self._room.wait()
                    continue
                try:
                    if pull_batch is not None and (batches_only or room >= batch_size):  # type: ignore[operator]
                        items = await pull_batch()
                        if not items:
                            continue
                    else:
                        items = [await self._pull()]
                except Timeout:
                    continue  # a backend whose pull has a default timeout: keep reading ahead
                with cond:
                    if self._closed:  # close() took its snapshot: it nacks these too
                        self._late.extend(items)
                        return
                    buffer.extend(items)
                    if self._waiting:
                        cond.notify()
        except asyncio.CancelledError:
            raise
        except BaseException as exc:
            with cond:
                buffer.append(_Failure(exc))
                cond.notify_all()

    def _resume(self) -> None:
        if self._room is not None:
            self._room.set()

    # -- the caller side -----------------------------------------------------------------
    def _next(self, timeout: float | None) -> W:
        if self._gen != generation():
            check_not_in_loop(f"the {self._what}")
            with _portal.reopen_lock():
                if self._gen != generation():
                    self._reopen()
        elif _portal._get_running_loop() is not None:
            check_not_in_loop(f"the {self._what}")
        cond, buffer = self._cond, self._buffer
        with cond:
            if self._stopping:
                raise ClosedError(f"the blocking {self._what} was stopped")
            if not buffer:
                if self._closed:
                    raise ClosedError(f"the blocking {self._what} is closed")
                self._waiting += 1
                try:
                    arrived = cond.wait_for(lambda: buffer or self._closed or self._stopping, timeout)
                finally:
                    self._waiting -= 1
                if not arrived:
                    raise Timeout(f"nothing arrived within {timeout} s")
                if self._closed or self._stopping:
                    raise ClosedError(f"the blocking {self._what} is closed")
            item = buffer[0]
            if type(item) is _Failure:
                raise item.error  # kept: every later call raises it as well
            buffer.popleft()
            wake = self._paused and len(buffer) <= self._read_ahead // 2
            if wake:
                self._paused = False
        if wake:
            self._portal.call_soon(self._resume)
        return self._wrap(item)

    def _wrap(self, item: Any) -> W:
        raise NotImplementedError

    def stop(self) -> None:
        """End a ``for`` loop (or a waiting ``next_message``) over this consumer; safe in a signal handler.

        Nothing is closed here: the loop ends with the item in hand handled, and the caller then
        closes the consumer (leaving its ``with`` block), which nacks what was read ahead.
        """
        self._stopping = True
        self._portal.call_soon(self._wake_stopped)

    def _wake_stopped(self) -> None:
        with self._cond:
            self._cond.notify_all()

    def _reopen(self) -> None:
        """A forked child: the inherited source and buffer are abandoned, a fresh source opened."""
        _portal.abandon(dict(self.__dict__))  # never freed here: see portal.abandon
        self._open()

    def _settle(self, op: int, item: Any, arg: Any, future: concurrent.futures.Future[None] | None) -> None:
        wake = False
        with self._lock:
            if self._closed:
                raise ClosedError(f"the blocking {self._what} is closed")
            self._settle_queue.append((op, item, arg, future))
            self._unsettled += 1
            if not self._settling:
                self._settling = wake = True
        if wake:
            self._portal.call_soon(self._start_settling)

    def _start_settling(self) -> None:
        asyncio.get_running_loop().create_task(self._settle_all())

    async def _settle_all(self) -> None:
        self._in_flight: list[tuple[int, Any, Any, Any]] = []
        try:
            await self._settle_queued()
        except BaseException as exc:  # the loop is going away (cancelled) or worse: fail, never hang
            with self._lock:
                dropped: list[tuple[int, Any, Any, Any]] = list(self._settle_queue)
                self._settle_queue.clear()
                self._settling = False
                self._unsettled = 0
                self._settle_errors.append(exc)
                self._cond.notify_all()
            for entry in (*self._in_flight, *dropped):
                future = entry[3]
                if future is not None and not future.done():
                    future.set_exception(
                        ClosedError(f"the settlement was not done: the {self._what}'s loop stopped")
                    )
            raise

    async def _settle_queued(self) -> None:
        while True:
            with self._lock:
                if not self._settle_queue:
                    self._settling = False
                    self._cond.notify_all()
                    return
                taken = self._in_flight = list(self._settle_queue)
                self._settle_queue.clear()
            for group, futures in _groups(taken):
                op, arg = group[0][0], group[0][2]
                items = [entry[1] for entry in group]
                error: BaseException | None = None
                try:
                    if op == _ACK:
                        await ack_all(items)
                    elif op == _NACK:
                        await nack_all(items, arg)
                    else:
                        await commit_highest_offsets(items)
                except Exception as exc:
                    error = exc
                for future in futures:
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)
                if error is not None and len(futures) < len(group):
                    log.warning("settling %d items failed: %s", len(group), error)
                    with self._lock:
                        self._settle_errors.append(error)
            with self._lock:
                self._unsettled -= len(taken)

    def _wait_settled(self, timeout: float | None) -> None:
        limit = self.timeout if timeout is None else timeout
        with self._lock:
            if not self._cond.wait_for(lambda: not self._settling, limit):
                raise Timeout(f"{self._unsettled} settlements were still pending after {limit} s")
            errors, self._settle_errors = self._settle_errors, []
        if errors:
            raise AckError(f"{len(errors)} settlements failed; the first: {errors[0]}") from errors[0]

    def _limit(self, timeout: float | None) -> float:
        return self.timeout if timeout is None else timeout

    def _queue_settle(self, op: int, item: Any, arg: Any, wait: bool, timeout: float | None) -> None:
        if self._gen != generation():
            raise ClosedError("this message was delivered to the parent process before a fork")
        future: concurrent.futures.Future[None] | None = concurrent.futures.Future() if wait else None
        if wait:
            check_not_in_loop("a settlement with wait=True")
        self._settle(op, item, arg, future)
        if future is not None:
            limit = self._limit(timeout)
            try:
                future.result(limit)
            except concurrent.futures.TimeoutError:
                raise Timeout(f"the settlement did not finish within {limit} s") from None

    def _flush_at_exit(self, deadline: float) -> int:
        """At interpreter exit: send the queued acks, nacks and commits (by ``deadline`` at the
        latest); the number still pending."""
        if self._gen != generation() or self._closed:
            return 0
        limit = max(0.0, min(self.close_timeout, deadline - clock.monotonic()))
        with self._lock:
            self._cond.wait_for(lambda: not self._settling, limit)
            return self._unsettled

    def _forked(self) -> None:
        """In a forked child: nothing to do here (every call compares generations and re-opens)."""

    def flush(self, timeout: float | None = None) -> None:
        """Wait until every ack, nack and commit queued so far is done (``timeout`` seconds at most).

        Raises :class:`~broker.errors.AckError` (the first failure chained) when one failed.
        """
        check_not_in_loop("flush()")
        if self._gen == generation():
            self._wait_settled(timeout)

    def close(self, timeout: float | None = None) -> None:
        """Finish queued settlements, stop reading ahead, and close the async consumer. Idempotent.

        A call blocked in :meth:`next_message` / ``for`` in another thread returns
        (``ClosedError`` / the loop ends).
        """
        if self._closed:
            return
        check_not_in_loop("close()")
        limit = self.close_timeout if timeout is None else timeout
        if self._gen != generation():
            # not under the inherited lock: the parent's loop thread may have held it at the fork
            self._closed = True
            return
        error: BaseException | None = None
        try:
            self._wait_settled(limit)
        except Exception as exc:
            error = exc
        with self._cond:
            self._closed = True
            left = [item for item in self._buffer if type(item) is not _Failure]
            self._buffer.clear()
            self._cond.notify_all()
        self._fetcher.cancel()
        _portal.forget_at_exit(self)
        if not self._backend.closed:
            self._backend._call(
                _close_source, self, left, timeout=limit, what=f"closing the {self._what}"
            )
        if error is not None:
            raise error


async def _opened(opener: Callable[[], Any]) -> Any:
    source = opener()
    # Entering creates what the consumer reads (queue, subscription): what is published after
    # messages() returns reaches it, as after ``async with backend.messages(...)``.
    return await source.__aenter__()


async def _close_source(consumer: Any, left: list[Any]) -> None:
    task = consumer._fetch_task
    if task is not None and not task.done():
        task.cancel()  # and wait: a pull finishing now puts its item in _late, nacked below
        await asyncio.wait({task}, timeout=_FETCH_STOP)
    left = [*left, *consumer._late]
    consumer._late.clear()
    unsettled = [item for item in left if isinstance(item, Message) and not item.settled]
    if unsettled:  # read ahead, never handed out: redelivered promptly
        try:
            await nack_all(unsettled)
        except Exception:
            log.debug("nacking the read-ahead messages failed", exc_info=True)
    await consumer._source.close()


#: Seconds a close waits for the read-ahead task to stop before it closes the source anyway.
_FETCH_STOP = 5.0


def _groups(
    taken: list[tuple[int, Any, Any, Any]],
) -> Iterator[tuple[list[tuple[int, Any, Any, Any]], list[concurrent.futures.Future[None]]]]:
    """Runs of the same operation (and nack delay), in order: acks and nacks never overtake."""
    run: list[tuple[int, Any, Any, Any]] = []
    for entry in taken:
        if run and (entry[0] != run[0][0] or entry[2] != run[0][2]):
            yield run, [e[3] for e in run if e[3] is not None]
            run = []
        run.append(entry)
    if run:
        yield run, [e[3] for e in run if e[3] is not None]


class SyncMessage:
    """One delivered message, with blocking-friendly ``ack()`` / ``nack()``.

    The message's fields are those of :class:`broker.Message`; ``message`` is the async message
    itself. Acking twice is a no-op; ack after nack raises :class:`~broker.errors.AckError`.
    """

    __slots__ = ("_consumer", "_done", "message")

    def __init__(self, consumer: SyncMessages, message: Message) -> None:
        self._consumer = consumer
        self._done = -1
        #: The :class:`broker.Message` underneath.
        self.message = message

    def __repr__(self) -> str:
        return f"<SyncMessage {self.message.id!r}>"

    id: Forwarded[str] = Forwarded("message", "The broker's id of the message.")
    data: Forwarded[bytes] = Forwarded("message", "The payload.")
    key: Forwarded[str | None] = Forwarded("message", "The key (None: none).")
    attributes: Forwarded[Mapping[str, str]] = Forwarded("message", "The attributes.")
    publish_time: Forwarded[float | None] = Forwarded(
        "message", "When it was published (epoch seconds), where the broker says."
    )
    delivery_attempt: Forwarded[int | None] = Forwarded(
        "message", "1 on first delivery, where the broker knows."
    )
    decoded: Forwarded[Any] = Forwarded(
        "message", "The decoded value (consumers opened with ``type=``; see :mod:`broker.typed`)."
    )

    def _mark(self, op: int) -> bool:
        if self._done == op:
            return False
        if self._done != -1:
            raise AckError(
                "the message was settled the other way already (ack after nack, or nack after ack)"
            )
        self._done = op
        return True

    def ack(self, *, wait: bool = False, timeout: float | None = None) -> None:
        """Acknowledge the message; with ``wait`` return only once the broker has the ack."""
        if self._mark(_ACK):
            self._consumer._queue_settle(_ACK, self.message, None, wait, timeout)

    def nack(self, delay: float | None = None, *, wait: bool = False, timeout: float | None = None) -> None:
        """Ask for redelivery (after ``delay`` seconds where the broker can)."""
        if self._mark(_NACK):
            self._consumer._queue_settle(_NACK, self.message, delay, wait, timeout)

    def in_progress(self, *, timeout: float | None = None) -> None:
        """Extend the message's deadline (waits for the broker)."""
        self._consumer._backend._call(
            self.message.in_progress, timeout=self._consumer._limit(timeout), what="in_progress()"
        )


class SyncRecord:
    """One record of a partitioned log; :meth:`commit` commits its offset and every lower one."""

    __slots__ = ("_consumer", "record")

    def __init__(self, consumer: SyncRecords, record: Record) -> None:
        self._consumer = consumer
        #: The :class:`broker.Record` underneath.
        self.record = record

    def __repr__(self) -> str:
        return f"<SyncRecord {self.record.topic}[{self.record.partition}]@{self.record.offset}>"

    topic: Forwarded[str] = Forwarded("record", "The record's topic.")
    partition: Forwarded[int] = Forwarded("record", "The record's partition.")
    offset: Forwarded[int] = Forwarded("record", "The record's offset in its partition.")
    key: Forwarded[str | None] = Forwarded("record", "The key (None: none).")
    value: Forwarded[bytes | None] = Forwarded("record", "The payload (None: a tombstone).")
    attributes: Forwarded[Mapping[str, str]] = Forwarded("record", "The attributes.")
    decoded: Forwarded[Any] = Forwarded(
        "record", "The decoded value (consumers opened with ``type=``; see :mod:`broker.typed`)."
    )

    def commit(self, *, wait: bool = False, timeout: float | None = None) -> None:
        """Commit this record's offset (and every lower one of its partition)."""
        self._consumer._queue_settle(_COMMIT, self.record, None, wait, timeout)

    ack = commit


class SyncMessages(_Consumer[SyncMessage]):
    """A blocking per-message consumer: iterate with ``for``, or call :meth:`next_message`."""

    _what = "messages() consumer"
    _pulls_batches = True

    async def _pull(self) -> Any:
        return await self._source.next_message()

    def _wrap(self, item: Any) -> SyncMessage:
        return SyncMessage(self, item)

    def next_message(self, timeout: float | None = None) -> SyncMessage:
        """The next message; :class:`~broker.errors.Timeout` when none arrives within ``timeout``.

        ``timeout`` None waits until a message arrives or the consumer is closed.
        """
        return self._next(timeout)


class SyncRecords(_Consumer[SyncRecord]):
    """A blocking record consumer: iterate with ``for``, or call :meth:`next_record`."""

    _what = "records() consumer"
    _pulls_batches = True
    _pull_name = "next_record"

    async def _pull(self) -> Any:
        return await self._source.next_record()

    def _wrap(self, item: Any) -> SyncRecord:
        return SyncRecord(self, item)

    def next_record(self, timeout: float | None = None) -> SyncRecord:
        """The next record; :class:`~broker.errors.Timeout` when none arrives within ``timeout``."""
        return self._next(timeout)

    def commit(self, timeout: float | None = None) -> None:
        """Wait until every record commit queued so far is done (see :meth:`flush`)."""
        self.flush(timeout)
