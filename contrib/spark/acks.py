"""An acknowledging source for brokers that cannot replay (Pub/Sub, Service Bus): journal, then ack.

Spark needs to read a micro-batch again after a failure, which a queue cannot do. So the driver
pulls messages, writes them to a journal file (Arrow IPC, one file per micro-batch, under the
``journal`` directory) *before* Spark plans the batch, keeps them unacknowledged, extends their
deadlines (``in_progress()``) every ``extendInterval`` seconds, and acknowledges a batch once
Spark has committed it: when Spark asks for the offsets after it (``latestOffset(start)``, which
it does only after the batch before ``start`` is in its commit log) or calls ``commit(end)``.
Executors read a batch from the journal, so it must be on a file system they share with the
driver (any local path in local mode).

This is **at-least-once**: if the driver dies between running a batch and planning the next one,
that batch's messages are redelivered by the broker after their deadline, and the restarted query
replays the batch from the journal as well. De-duplicate downstream by the ``id`` column (the
broker's message id). Throughput is bound by one driver process pulling.

Offsets are ``{"journal": <directory>, "seq": <messages journaled so far>}``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from broker import Message
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import arrow_schema, messages_batch, pa
from broker.contrib.spark.options import Options
from broker.errors import ConfigError

__all__ = ["AckSource", "read_journal"]

log = logging.getLogger("broker.contrib.spark")


def _name(start: int, end: int) -> str:
    return f"{start:020d}-{end:020d}.arrow"


def _files(directory: Path) -> list[tuple[int, int, Path]]:
    out = []
    for path in directory.glob("*.arrow"):
        first, _, last = path.stem.partition("-")
        if first.isdigit() and last.isdigit():
            out.append((int(first), int(last), path))
    return sorted(out)


def read_journal(directory: str, start: int, end: int) -> Iterator[Any]:
    """The journaled rows with offsets in ``[start, end)``, as Arrow record batches.

    A journal written before keys and attribute values became binary (``key string``,
    ``attributes map<string,string>``) is cast to :data:`~broker.contrib.spark.arrow.READ_SCHEMA` (the
    UTF-8 text becomes its bytes), so a query restarted after an upgrade replays it.
    """
    pa()  # MissingDependency when pyarrow is absent
    import pyarrow.compute as pc  # type: ignore[import-untyped]
    import pyarrow.ipc  # type: ignore[import-untyped]

    schema = arrow_schema()
    files = [f for f in _files(Path(directory)) if f[0] < end and f[1] > start]
    covered = start
    for first, last, path in files:
        if first > covered:
            break
        with pyarrow.ipc.open_file(str(path)) as source:
            for i in range(source.num_record_batches):
                batch = source.get_batch(i)
                if not batch.schema.equals(schema):
                    batch = batch.cast(schema)
                offsets = batch.column(batch.schema.names.index("offset"))
                mask = pc.and_(pc.greater_equal(offsets, start), pc.less(offsets, end))
                yield batch.filter(mask)
        covered = max(covered, last)
    if covered < end:
        raise ConfigError(
            f"the journal in {directory} lacks messages {covered}..{end - 1}: was it deleted, or is it on "
            "a file system the executors do not share with the driver?"
        )


class AckSource:
    """The driver side: pulls, journals, extends deadlines, acknowledges on commit."""

    def __init__(self, options: Options) -> None:
        self.options = options
        topics = options.topics()
        if len(topics) != 1:
            raise ConfigError("an acknowledging source reads one topic")
        self.topic = topics[0]
        self.subscription = options.require("subscription", "the subscription to consume")
        journal = options.require("journal", "a directory (shared with the executors) for the batch journal")
        self.journal = os.path.abspath(journal.removeprefix("file:"))
        self.max_records = options.get_int("maxRecordsPerTrigger", 10_000)
        self.pull_timeout = options.get_float("pullTimeout", 1.0)
        self.extend_interval = options.get_float("extendInterval", 10.0)
        self._backend: Any = None
        self._iterator: Any = None
        self._held: dict[int, Message] = {}
        self._extender: asyncio.Task[None] | None = None
        #: Set by Trigger.AvailableNow: stop pulling after the first empty pull.
        self.available_now = False
        self._drained = False
        self._initial: dict[str, Any] | None = None

    def offset(self, seq: int) -> dict[str, Any]:
        """The Spark offset for ``seq``."""
        return {"journal": self.journal, "seq": seq}

    def initial(self) -> dict[str, Any]:
        """Where a new query starts (Spark asks only when its checkpoint has no offsets yet).

        A journal left by an earlier query is stale: no checkpoint refers to it any more, and its
        unacknowledged messages come back from the broker. Spark may ask more than once; the
        answer stays the same.
        """
        if self._initial is None:
            directory = Path(self.journal)
            directory.mkdir(parents=True, exist_ok=True)
            for _, _, path in _files(directory):
                path.unlink(missing_ok=True)
            self._initial = self.offset(0)
        return dict(self._initial)

    async def _open(self) -> Any:
        if self._iterator is None:
            self._backend = self.options.connect()
            size = max(1, min(self.max_records, 1000))
            self._iterator = self._backend.batched_messages(
                self.topic, self.subscription, batch_size=size, batch_timeout=self.pull_timeout
            )
            if self._backend.capabilities.in_progress and self.extend_interval > 0:
                self._extender = asyncio.get_running_loop().create_task(self._extend())
        return self._iterator

    async def _extend(self) -> None:
        while True:
            await asyncio.sleep(self.extend_interval)
            held = list(self._held.values())
            if not held:
                continue
            results = await asyncio.gather(*(m.in_progress() for m in held), return_exceptions=True)
            failed = [r for r in results if isinstance(r, Exception)]
            if failed:
                log.warning("extending %d of %d deadlines failed: %s", len(failed), len(held), failed[0])

    async def _pull(self, limit: int) -> list[Message]:
        iterator = await self._open()
        out: list[Message] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.pull_timeout
        while len(out) < limit:
            remaining = deadline - loop.time()
            if remaining <= 0:
                break
            batch = await iterator.next_batch(timeout=remaining)
            if not batch:
                break
            out.extend(batch)
        return out

    async def _hold(self, first: int, messages: list[Message]) -> None:
        for i, message in enumerate(messages):
            self._held[first + i] = message

    def latest(self, start: dict[str, Any], limit: int | None) -> dict[str, Any]:
        """Pull up to ``limit`` messages, journal them after ``start``; the new end offset."""
        first = int(start.get("seq", 0))
        directory = Path(self.journal)
        directory.mkdir(parents=True, exist_ok=True)
        self.commit(start)  # Spark plans after ``start`` only once everything before it is committed
        for begin, _, path in _files(directory):
            if begin >= first:  # journaled but never planned: the broker redelivers those messages
                path.unlink(missing_ok=True)
        runtime.run(self._release_from(first))
        if self.available_now and self._drained:
            return self.offset(first)
        want = min(limit or self.max_records, self.max_records)
        messages = runtime.run(self._pull(want))
        if not messages:
            self._drained = True
            return self.offset(first)
        end = first + len(messages)
        batch = messages_batch(messages, self.topic, first)
        import pyarrow.ipc

        final = directory / _name(first, end)
        temporary = final.with_suffix(".tmp")
        with pa().OSFile(str(temporary), "wb") as sink, pyarrow.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        os.replace(temporary, final)
        runtime.run(self._hold(first, messages))
        return self.offset(end)

    async def _release_from(self, first: int) -> None:
        """Nack held messages at or after ``first`` (journaled, never planned): redeliver them."""
        late = [seq for seq in self._held if seq >= first]
        if late:
            messages = [self._held.pop(seq) for seq in late]
            await asyncio.gather(*(m.nack() for m in messages), return_exceptions=True)

    async def _ack_below(self, end: int) -> int:
        done = [seq for seq in self._held if seq < end]
        messages = [self._held.pop(seq) for seq in done]
        results = await asyncio.gather(*(m.ack() for m in messages), return_exceptions=True)
        failed = [r for r in results if isinstance(r, Exception)]
        if failed:
            log.warning("acknowledging %d of %d messages failed: %s", len(failed), len(messages), failed[0])
        return len(messages)

    def commit(self, end: dict[str, Any]) -> None:
        """Spark committed everything below ``end``: acknowledge it and drop its journal files."""
        seq = int(end.get("seq", 0))
        runtime.run(self._ack_below(seq))
        for _, last, path in _files(Path(self.journal)):
            if last <= seq:
                path.unlink(missing_ok=True)

    async def _close(self) -> None:
        if self._extender is not None:
            self._extender.cancel()
        if self._backend is not None:
            await self._backend.close()

    def stop(self) -> None:
        """Close the connection; unacknowledged messages are redelivered by the broker."""
        runtime.run(self._close())
