"""Reading messages back from the queue topic by offset (for redelivering batched STARTs)."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from broker.errors import Timeout
from broker.log import Log, LogReader, TopicPartition
from broker.message import Record

__all__ = ["QueueTopicReader"]


class QueueTopicReader:
    """One reader outside any group, shared by a tracker's redeliveries one read at a time."""

    def __init__(self, log_port: Log, *, timeout: float = 10.0) -> None:
        self._log = log_port
        self._reader: LogReader | None = None
        self._lock = asyncio.Lock()
        #: Seconds one read may go without reaching its last offset before it raises Timeout.
        self.timeout = timeout

    async def read(self, tp: TopicPartition, offsets: Sequence[int]) -> tuple[dict[int, Record], list[int]]:
        """The records at ``offsets`` of ``tp``, and the offsets the log no longer has.

        An offset is gone when retention deleted it, or when the log skips it (a compacted or
        transaction-control offset). Raises :class:`~broker.errors.Timeout` when the last offset
        is not reached in ``timeout`` seconds (the caller retries).
        """
        wanted = set(offsets)
        found: dict[int, Record] = {}
        if not wanted:
            return found, []
        async with self._lock:
            # Only the low watermark decides: a consumer read these records, so they existed (some
            # brokers report a stale high watermark).
            low, _ = await self._log.watermarks(tp)
            gone = sorted(o for o in wanted if o < low)
            wanted.difference_update(gone)
            if not wanted:
                return found, gone
            first, last = min(wanted), max(wanted)
            if self._reader is None:
                self._reader = self._log.reader()
            reader = self._reader
            reader.assign({tp: first})
            try:
                loop = asyncio.get_running_loop()
                deadline = loop.time() + self.timeout
                seen = first - 1
                while seen < last:
                    if loop.time() >= deadline:
                        raise Timeout(f"reading {tp} up to offset {last} took over {self.timeout}s")
                    for record in await reader.poll(1000, 0.2):
                        if record.partition != tp.partition or record.topic != tp.topic:
                            continue
                        seen = max(seen, record.offset)
                        if record.offset in wanted:
                            found[record.offset] = record
                    if seen < last and reader.position(tp) > last:
                        break  # the log skipped the rest
            finally:
                reader.unassign([tp])
            gone.extend(sorted(wanted.difference(found)))
            return found, gone

    async def close(self) -> None:
        """Close the reader. Idempotent."""
        reader, self._reader = self._reader, None
        if reader is not None:
            await reader.close()
