"""Reading messages back from the queue topic by offset (for redelivering batched STARTs).

Redeliveries ask for a few offsets each, often many at once (a receiver nacking every message,
a crashed consumer's batch expiring). Reads are coalesced: every request queued while a sweep
runs is served by the next sweep, which reads each partition once from its lowest wanted offset
to its highest. A hundred nacks cost one sweep, not a hundred assign-fetch-unassign round trips
(which took ~0.1 s each and made the hundredth nack wait ten seconds).

The sweep needs no watermark to tell which offsets are gone: a wanted offset the reader passed
without seeing was removed from the log (retention, compaction, a transaction marker). Only when
a partition yields nothing in time is its low watermark asked, to tell "all deleted" from "slow"
(a metadata request on a topic the admin client once saw missing can fail for a while; it is
never on the path of an ordinary redelivery).
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker import Record
from broker.errors import Timeout
from broker.log import Log, LogReader, ReadHints, TopicPartition

__all__ = ["QueueTopicReader"]

_Request = tuple[set[int], "asyncio.Future[tuple[dict[int, Record], list[int]]]"]


class QueueTopicReader:
    """One reader outside any group, shared by a tracker's redeliveries, its reads coalesced."""

    def __init__(self, log_port: Log, *, timeout: float = 10.0) -> None:
        self._log = log_port
        self._reader: LogReader | None = None
        self._lock = asyncio.Lock()
        self._pending: dict[TopicPartition, list[_Request]] = {}
        #: Seconds one sweep may go without reaching a partition's last offset (then Timeout).
        self.timeout = timeout
        #: Sweeps done (for tests: many concurrent reads cost few sweeps).
        self.sweeps = 0

    async def read(self, tp: TopicPartition, offsets: Sequence[int]) -> tuple[dict[int, Record], list[int]]:
        """The records at ``offsets`` of ``tp``, and the offsets the log no longer has.

        An offset is gone when retention deleted it, or when the log skips it (a compacted or
        transaction-control offset). Raises :class:`~broker.errors.Timeout` when the last offset
        is not reached in ``timeout`` seconds (the caller retries).
        """
        wanted = set(offsets)
        if not wanted:
            return {}, []
        future: asyncio.Future[tuple[dict[int, Record], list[int]]]
        future = asyncio.get_running_loop().create_future()
        request = (wanted, future)
        self._pending.setdefault(tp, []).append(request)
        try:
            async with self._lock:
                if not future.done():
                    await asyncio.sleep(0)  # let the reads asked in this same pass join the sweep
                    batch, self._pending = self._pending, {}
                    try:
                        await self._sweep(batch)
                    finally:
                        for requests in batch.values():
                            for _, waiting in requests:
                                if not waiting.done():
                                    waiting.set_exception(Timeout("the read was abandoned; retry"))
        except asyncio.CancelledError:
            queued = self._pending.get(tp, [])
            for index, entry in enumerate(queued):
                if entry is request:
                    del queued[index]
                    break
            raise
        return future.result()

    async def _sweep(self, batch: dict[TopicPartition, list[_Request]]) -> None:
        """Read every partition of ``batch`` once, from its lowest to its highest wanted offset."""
        self.sweeps += 1
        wants = {tp: set().union(*(wanted for wanted, _ in requests)) for tp, requests in batch.items()}
        found: dict[TopicPartition, dict[int, Record]] = {tp: {} for tp in wants}
        last = {tp: max(offsets) for tp, offsets in wants.items()}
        seen = {tp: min(offsets) - 1 for tp, offsets in wants.items()}
        if self._reader is None:
            self._reader = self._open_reader()
        reader = self._reader
        reader.assign({tp: min(offsets) for tp, offsets in wants.items()})
        open_tps = set(wants)
        try:
            loop = asyncio.get_running_loop()
            deadline = loop.time() + self.timeout
            while open_tps and loop.time() < deadline:
                for record in await reader.poll(1000, 0.2):
                    tp = TopicPartition(record.topic, record.partition)
                    if tp not in open_tps:
                        continue
                    seen[tp] = max(seen[tp], record.offset)
                    if record.offset in wants[tp]:
                        found[tp][record.offset] = record
                for tp in list(open_tps):
                    if seen[tp] >= last[tp] or reader.position(tp) > last[tp]:
                        open_tps.discard(tp)  # reached (or the log skipped the rest)
            for tp in list(open_tps):
                # Nothing more in time: either everything left was deleted, or the log is slow.
                try:
                    low, _ = await self._log.watermarks(tp)
                except Exception:
                    low = -1
                if low > last[tp]:
                    seen[tp] = last[tp]
                    open_tps.discard(tp)
        finally:
            reader.unassign(list(wants))
        for tp, requests in batch.items():
            if tp in open_tps:
                error = Timeout(f"reading {tp} up to offset {last[tp]} took over {self.timeout}s")
                for _, future in requests:
                    if not future.done():
                        future.set_exception(error)
                continue
            records = found[tp]
            for wanted, future in requests:
                if future.done():
                    continue
                mine = {o: records[o] for o in wanted if o in records}
                future.set_result((mine, sorted(wanted.difference(mine))))

    def _open_reader(self) -> LogReader:
        # Single records are a few bytes: the log's own fetch settings could hold each read for its
        # fetch wait (0.5 s on Kafka). A wanted offset that retention removed resets to the
        # earliest one left, so the reader passes it (and it counts as gone).
        return self._log.reader(hints=ReadHints(min_bytes=1, max_wait=0.1, out_of_range="earliest"))

    async def close(self) -> None:
        """Close the reader. Idempotent."""
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
