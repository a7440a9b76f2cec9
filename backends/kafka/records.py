"""``RecordIterator`` and ``BatchedIterator`` over a consumer-group member.

``Record.ack()`` commits ``offset + 1`` of its partition (acks of a partition this member lost
in a rebalance are dropped). It queues the commit and returns without waiting for the broker, as
Kafka consumers commit by default: commits are sent asynchronously, at most one request per
``COMMIT_INTERVAL`` (acks arriving meanwhile are merged into it), so the textbook loop (``async for
record ...: handle; await record.ack()``) runs at fetch speed, not one commit round trip per
record. ``commit()`` waits until the broker has every commit acked so far (and raises
``AckError`` if it refused one); a revoke and ``close()`` do the same before the partitions go. A
crash before a commit reached the broker reads its records again (at-least-once, as with any Kafka
consumer).

``close()`` finishes pending commits, then leaves the group; records fetched but not handed out
are read again by the partition's next owner.
"""

from __future__ import annotations

from typing import Any, Self

from broker import Record
from broker.backends.kafka.provision import StartCheck
from broker.backends.kafka.sdk_consumer import GroupCore
from broker.driver.forwarding import Forwarded
from broker.driver.resources import BatchedRecordIteration, RecordIteration
from broker.errors import Timeout
from broker.log import TopicPartition

__all__ = ["KafkaBatchedIterator", "KafkaRecordIterator"]


class KafkaRecordIterator(StartCheck, RecordIteration):
    """Pull records one at a time from ``topics`` as a member of ``group``.

    Under ``provision="verify"`` the topics are checked when it is entered or first read
    (:class:`~broker.backends.kafka.provision.StartCheck`).
    """

    def __init__(self, core: GroupCore, batch_size: int, batch_timeout: float) -> None:
        self._core = core
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    def __repr__(self) -> str:
        return f"<{type(self).__name__} group={self._core.group!r} topics={list(self._core.topics)}>"

    group: Forwarded[str] = Forwarded("_core", "The consumer group.")
    consumer: Forwarded[Any] = Forwarded(
        "_core", "The confluent-kafka ``Consumer`` (escape hatch; call it only through ``core.thread``)."
    )

    @property
    def core(self) -> GroupCore:
        """The group member underneath."""
        return self._core

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this member owns right now."""
        return frozenset(TopicPartition(*tp) for tp in self._core.assigned)

    async def group_metadata(self) -> Any:
        """The SDK's group metadata, for ``KafkaTransactionalPublisher.send_offsets``."""
        return await self._core.group_metadata()

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; ``Timeout`` when none arrives within ``timeout`` seconds."""
        if self.start_check is not None:
            await self._checked_start()
        records = await self._core.records(1, timeout)
        if not records:
            raise Timeout(f"no record within {timeout}s")
        return records[0]

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """The records that are ready, up to ``batch_size``; else the first to arrive in the window.

        The window is ``timeout`` (default ``batch_timeout``) seconds; ``[]`` when it closes empty.
        """
        if self.start_check is not None:
            await self._checked_start()
        return await self._core.records(self.batch_size, self.batch_timeout if timeout is None else timeout)

    async def __aenter__(self) -> Self:
        await self._checked_start()
        return self

    async def commit(self) -> None:
        """Wait until the broker has the commit of every record acked so far.

        Raises ``AckError`` when the broker refuses one (the refused commit stays pending: a later
        ``commit()``, revoke or close sends it again).
        """
        await self._core.flush()

    async def close(self) -> None:
        """Commit what is pending, leave the group. Idempotent."""
        await self._core.close()


class KafkaBatchedIterator(KafkaRecordIterator):
    """The batched view: ``async for`` yields non-empty batches."""

    __aiter__ = BatchedRecordIteration.__aiter__  # type: ignore[assignment]
