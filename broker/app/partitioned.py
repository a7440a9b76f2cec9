"""Per-partition ordered workers over a partitioned log, committing only what is finished below.

:class:`PartitionedReceiver` reads a :class:`~broker.RecordIterator` and hands each record to a
*lane*: one per partition (records of a partition one after the other, partitions in parallel),
or with ``per_key`` one per partition and key (records of one key in order, keys of a partition in
parallel). Each partition's commit is the highest record below its lowest unfinished one: a record
finished ahead of a slower one of the same partition is never committed past it, so a crash
redoes the unfinished record and the ones after it, never skips one.

At most ``max_in_flight`` records are read and not finished; ``concurrency`` handlers run at a
time. ``stop(drain_timeout)`` stops reading, lets the lanes finish what they hold for up to
``drain_timeout`` seconds, then cancels the rest (not committed: read again after a restart).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable, Hashable
from typing import Any

from broker.driver.resources import stop_task
from broker.errors import BrokerError, ConfigError
from broker.message import Record

__all__ = ["DEFAULT_MAX_IN_FLIGHT", "PartitionedReceiver"]

log = logging.getLogger("broker.app")

#: Records read and not finished, at most, by default (a bound on memory and on redone work).
DEFAULT_MAX_IN_FLIGHT = 1000


class _Partition:
    """The records of one partition in read order, and what was committed."""

    __slots__ = ("committed", "entries", "lock")

    def __init__(self) -> None:
        #: [record, finished] in the order read (offsets rise, except after a rebalance re-reads).
        self.entries: deque[list[Any]] = deque()
        self.committed = -1
        self.lock = asyncio.Lock()

    def finish(self, entry: list[Any]) -> Record | None:
        """Mark ``entry`` finished; the record to commit now (None: one before it is unfinished)."""
        entry[1] = True
        target: Record | None = None
        entries = self.entries
        while entries and entries[0][1]:
            target = entries.popleft()[0]
        return target

    async def commit(self, record: Record) -> None:
        """Commit ``record`` unless a higher offset was committed already (commits never go back)."""
        async with self.lock:
            if record.offset <= self.committed:
                return
            try:
                await record.ack()
            except BrokerError as exc:  # revoked in a rebalance: its new owner reads it again
                log.warning(
                    "could not commit %s/%d@%d: %r (it is read again: duplicates, nothing lost)",
                    record.topic,
                    record.partition,
                    record.offset,
                    exc,
                )
                return
            self.committed = record.offset


class PartitionedReceiver:
    """A receiver (``receive(handler)``, ``stop()``) running records in per-partition order."""

    def __init__(
        self,
        source: Any,
        *,
        per_key: bool = False,
        concurrency: int = 16,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        drain_timeout: float | None = None,
    ) -> None:
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if not isinstance(max_in_flight, int) or isinstance(max_in_flight, bool) or max_in_flight < 1:
            raise ConfigError(f"max_in_flight must be an int >= 1, got {max_in_flight!r}")
        self.source = source
        self.per_key = per_key
        self.concurrency = concurrency
        self.max_in_flight = max_in_flight
        #: Seconds running handlers get after ``stop()`` (None: as long as they need).
        self.drain_timeout = drain_timeout
        self._partitions: dict[tuple[str, int], _Partition] = {}
        self._lanes: dict[Hashable, tuple[deque[list[Any]], asyncio.Task[None]]] = {}
        self._slots = asyncio.Semaphore(max_in_flight)
        self._running = asyncio.Semaphore(concurrency)
        self._stop = asyncio.Event()
        self._failure: BaseException | None = None
        self._idle = asyncio.Event()
        self._idle.set()

    def __repr__(self) -> str:
        return f"<PartitionedReceiver {self.source!r} {'stopped' if self.stopped else 'running'}>"

    async def __aenter__(self) -> PartitionedReceiver:
        enter = getattr(self.source, "__aenter__", None)
        if enter is not None:
            await enter()
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        leave = getattr(self.source, "__aexit__", None)
        if leave is not None:
            await leave(*exc_info)

    @property
    def stopped(self) -> bool:
        """True once :meth:`stop` was called."""
        return self._stop.is_set()

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop reading; running lanes get ``drain_timeout`` seconds (default: the receiver's)."""
        if drain_timeout is not None:
            self.drain_timeout = drain_timeout
        self._stop.set()

    async def receive(self, handler: Callable[[Record], Awaitable[None]]) -> None:
        """Run ``handler`` on every record, in order per lane, until :meth:`stop` (then drain).

        ``handler`` finishes a record by returning; an exception it raises stops the receiver and
        is raised here (the record and the ones after it in its partition are not committed).
        """
        stopping = asyncio.ensure_future(self._stop.wait())
        try:
            while not self._stop.is_set() and await self._take_slot(stopping):
                reading = asyncio.ensure_future(self.source.next_record())
                await asyncio.wait({reading, stopping}, return_when=asyncio.FIRST_COMPLETED)
                if not reading.done():
                    # a record read as it was cancelled is read again after a restart
                    await stop_task(reading)
                    self._slots.release()
                    break
                try:
                    record = reading.result()
                except BaseException:
                    self._slots.release()
                    raise
                self._dispatch(record, handler)
            await self._drain()
        finally:
            stopping.cancel()
            lanes = [task for _, task in self._lanes.values()]
            for task in lanes:
                task.cancel()
            if lanes:
                await asyncio.gather(*lanes, return_exceptions=True)
        if self._failure is not None:
            raise self._failure

    async def _take_slot(self, stopping: asyncio.Future[Any]) -> bool:
        """Take one of the ``max_in_flight`` slots; False when the receiver stopped first."""
        taking = asyncio.ensure_future(self._slots.acquire())
        await asyncio.wait({taking, stopping}, return_when=asyncio.FIRST_COMPLETED)
        if taking.done() and not self._stop.is_set():
            return True
        await stop_task(taking)
        if taking.done() and not taking.cancelled():
            self._slots.release()  # acquired as the receiver stopped
        return False

    def _dispatch(self, record: Record, handler: Callable[[Record], Awaitable[None]]) -> None:
        where = (record.topic, record.partition)
        partition = self._partitions.get(where)
        if partition is None:
            partition = self._partitions[where] = _Partition()
        entry: list[Any] = [record, False, partition]
        partition.entries.append(entry)
        lane_key: Hashable = (*where, record.key) if self.per_key else where
        lane = self._lanes.get(lane_key)
        if lane is not None:
            lane[0].append(entry)
            return
        queue: deque[list[Any]] = deque([entry])
        self._idle.clear()
        task = asyncio.ensure_future(self._lane(lane_key, queue, handler))
        self._lanes[lane_key] = (queue, task)

    async def _lane(
        self, key: Hashable, queue: deque[list[Any]], handler: Callable[[Record], Awaitable[None]]
    ) -> None:
        try:
            while queue:
                entry = queue[0]
                record, _, partition = entry
                async with self._running:
                    try:
                        await handler(record)
                    except asyncio.CancelledError:
                        raise
                    except BaseException as exc:
                        if self._failure is None:
                            self._failure = exc
                        self._stop.set()
                        return
                queue.popleft()
                self._slots.release()
                target = partition.finish(entry)
                if target is not None:
                    await partition.commit(target)
        finally:
            if self._lanes.get(key, (None,))[0] is queue:
                del self._lanes[key]
            if not self._lanes:
                self._idle.set()

    async def _drain(self) -> None:
        if not self._lanes:
            return
        timeout = self.drain_timeout
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(timeout):
                await self._idle.wait()
        left = sum(len(queue) for queue, _ in self._lanes.values())
        if left:
            log.warning(
                "%d records were not finished within the %ss drain: not committed, read again after a "
                "restart",
                left,
                timeout,
            )
