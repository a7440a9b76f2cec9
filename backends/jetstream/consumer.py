"""The consumers of this backend, all over :class:`~broker.backends.jetstream.pull.PullEngine`.

* :class:`JetStreamMessageIterator` - one message at a time from a durable pull consumer; it pulls
  ``prefetch`` messages per request and hands them out one by one.
* :class:`JetStreamBatchedMessageIterator` - batches of up to ``batch_size``, one pull request each.
* :class:`JetStreamRecordIterator` - records from an ``AckPolicy.ALL`` consumer (a consumer group
  of one partition) or from an ephemeral replay consumer; it is also a batched record iterator.

Closing a consumer stops its pulls and naks the messages it received but never handed out, so
another consumer gets them at once instead of after ``ack_wait``. Messages handed out and still
unsettled stay with the server's ack-wait clock (acking them after close still works while the
backend is open).
"""

from __future__ import annotations

import time
from collections import deque

from nats.aio.msg import Msg

from broker import Message, Record
from broker.backends.jetstream.acker import JetStreamAcker, JetStreamCommitter, nak_quietly
from broker.backends.jetstream.mapping import to_messages, to_records
from broker.backends.jetstream.pull import PullEngine
from broker.driver.acking import start_ack_deadline
from broker.driver.batch_limits import check_batch_limits
from broker.driver.forwarding import Forwarded
from broker.driver.resources import (
    AsyncResource,
    BatchedMessageIteration,
    BatchedRecordIteration,
    MessageIteration,
    RecordIteration,
)
from broker.errors import Timeout

__all__ = [
    "JetStreamBatchedMessageIterator",
    "JetStreamBatchedRecordIterator",
    "JetStreamMessageIterator",
    "JetStreamRecordIterator",
]


class _Consumer(AsyncResource):
    """What every consumer shares: its engine, closing, ``async with``."""

    def __init__(self, engine: PullEngine) -> None:
        self._engine = engine
        #: The attribute that carries the de-duplication id (the connection's ``msg_id_attribute``).
        self._msg_id_attribute = engine.connection.settings.msg_id_attribute

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._engine.what}>"

    closed: Forwarded[bool] = Forwarded("_engine", "True once closed.")

    async def _leftovers(self) -> list[Msg]:
        return await self._engine.close()

    async def _pull_one(self, prefetch: int, timeout: float | None, what: str) -> list[Msg]:
        """What a pull for one ``what`` (up to ``prefetch`` ahead) brought; ``Timeout`` when nothing came."""
        msgs = await self._engine.pull(1, prefetch, timeout)
        if not msgs:
            raise Timeout(f"no {what} from {self._engine.what} within {timeout}s")
        return msgs

    async def close(self) -> None:
        """Stop consuming; what was received and not handed out is returned to the server. Idempotent."""
        leftovers = await self._leftovers()
        engine = self._engine
        await nak_quietly(engine.client, leftovers, engine.what, engine.connection.settings.request_timeout)


class _Batches(_Consumer):
    """A consumer that pulls batches: up to ``batch_size``, waiting ``batch_timeout`` by default."""

    def __init__(self, engine: PullEngine, batch_size: int, batch_timeout: float) -> None:
        super().__init__(engine)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    async def _pull_batch(self, timeout: float | None) -> list[Msg]:
        """What one pull of up to ``batch_size`` brought within ``timeout`` (default ``batch_timeout``)."""
        size = self.batch_size
        return await self._engine.pull(size, size, self.batch_timeout if timeout is None else timeout)


def _ack_wait(acker: JetStreamAcker) -> float | None:
    """The ack deadline the client counts for a handed-out message: ``ack_wait`` (None with a
    ``backoff``, whose waits differ per delivery)."""
    options = acker.options
    return None if options.backoff else options.ack_wait


class JetStreamMessageIterator(_Consumer, MessageIteration):
    """A MessageIterator on a durable pull consumer."""

    def __init__(self, engine: PullEngine, acker: JetStreamAcker, prefetch: int) -> None:
        super().__init__(engine)
        self.acker = acker
        self.prefetch = prefetch

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; ``Timeout`` when none arrives within ``timeout`` seconds."""
        msgs = await self._pull_one(self.prefetch, timeout, "message")
        messages = to_messages(msgs, self.acker, time.time(), self._msg_id_attribute)
        start_ack_deadline(messages, _ack_wait(self.acker))
        return messages[0]


class JetStreamBatchedMessageIterator(_Batches, BatchedMessageIteration):
    """A BatchedMessageIterator: each batch is what one pull request brought, up to ``batch_size``."""

    def __init__(
        self, engine: PullEngine, acker: JetStreamAcker, batch_size: int, batch_timeout: float
    ) -> None:
        check_batch_limits(batch_size, batch_timeout)
        super().__init__(engine, batch_size, batch_timeout)
        self.acker = acker

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to ``batch_size`` messages, as soon as any came; ``[]`` after the timeout."""
        msgs = await self._pull_batch(timeout)
        if not msgs:
            return []
        messages = to_messages(msgs, self.acker, time.time(), self._msg_id_attribute)
        start_ack_deadline(messages, _ack_wait(self.acker))
        return messages


class _RecordReader(_Batches):
    """Records of one consumer; offsets are stream sequences.

    With a group (an ``AckPolicy.ALL`` durable consumer) ``Record.ack()`` commits: it acks the
    record and every earlier one. Records handed out and not committed when the iterator closes
    are nacked, so the group's next reader starts at the first uncommitted record. Without a
    group (a replay) there is nothing to commit and ``ack()`` does nothing.
    """

    def __init__(self, engine: PullEngine, batch_size: int, batch_timeout: float, *, commits: bool) -> None:
        check_batch_limits(batch_size)
        super().__init__(engine, batch_size, batch_timeout)
        self.commits = commits
        self._handed: deque[Msg] = deque()
        self.committer: JetStreamCommitter | _NoCommit = (
            JetStreamCommitter(lambda: engine.client, self._committed) if commits else _NoCommit()
        )
        #: The stream sequence of the last record handed out (0 before the first).
        self.position = 0

    def _committed(self, record: Record) -> None:
        handed = self._handed
        offset = record.offset
        while handed and _sequence(handed[0]) <= offset:
            handed.popleft()

    def _hand_out(self, msgs: list[Msg]) -> list[Record]:
        records = to_records(msgs, self.committer, time.time(), self._msg_id_attribute)
        if self.commits:
            self._handed.extend(msgs)
        self.position = records[-1].offset
        return records

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; ``Timeout`` when none arrives within ``timeout`` seconds."""
        return self._hand_out(await self._pull_one(self.batch_size, timeout, "record"))[0]

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """Up to ``batch_size`` records, as soon as any came; ``[]`` after the timeout."""
        msgs = await self._pull_batch(timeout)
        return self._hand_out(msgs) if msgs else []

    async def _leftovers(self) -> list[Msg]:
        leftovers = await self._engine.close()
        if not self.commits:
            return []  # a replay consumer acks nothing and is deleted by the server when idle
        handed, self._handed = list(self._handed), deque()
        return handed + leftovers


class JetStreamRecordIterator(_RecordReader, RecordIteration):
    """A RecordIterator (``next_batch`` works too); ``async for`` yields records."""


class JetStreamBatchedRecordIterator(_RecordReader, BatchedRecordIteration):
    """A BatchedIterator (``next_record`` works too); ``async for`` yields non-empty batches."""


class _NoCommit:
    """The committer of replayed records: there is no group to commit for."""

    async def commit(self, record: Record) -> None:
        """Do nothing."""


def _sequence(msg: Msg) -> int:
    tokens = msg.reply.split(".")
    return int(tokens[5] if len(tokens) == 9 else tokens[7])
