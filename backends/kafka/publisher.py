"""Publishing to Kafka: the publish driver under ``broker.driver.publishing``, and the
``TransactionalPublisher``.

``publish`` returns once the broker acknowledged the record (its delivery report arrived);
``batch_publish`` enqueues every record first and then waits once for all their reports, so a
batch costs one wait, not one round trip per record. Records are validated (by the portable
layer) before the first one is enqueued. A ``timeout`` stops the wait, not the delivery.
"""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Protocol

from broker import OutboundMessage, Record
from broker.backends.kafka import sdk
from broker.backends.kafka.errors import error_of, translate
from broker.backends.kafka.mapping import produce_all
from broker.backends.kafka.provision import TopicCheck
from broker.backends.kafka.sdk_producer import AsyncProducer, DeliveryBatch
from broker.driver.forwarding import Forwarded
from broker.driver.publishing import DEFAULT_CLOSE_TIMEOUT, DriverPublisher, DriverTopic, HandOver
from broker.errors import ClosedError, PublishError, TransactionError
from broker.log import TopicPartition

__all__ = ["GroupMetadataSource", "KafkaPublishDriver", "KafkaPublisher", "KafkaTransactionalPublisher"]

log = logging.getLogger("broker.backends.kafka")


class KafkaPublishDriver:
    """Produces through one librdkafka producer shared by every topic handle."""

    __slots__ = ("check", "hand_over", "producer", "transaction_open")

    def __init__(self, producer: AsyncProducer, check: TopicCheck | None = None) -> None:
        self.producer = producer
        #: Sends still enqueueing their records (see :class:`~broker.driver.publishing.HandOver`).
        self.hand_over = HandOver()
        #: None: not transactional; else whether a transaction is open (publishing needs one).
        self.transaction_open: bool | None = None
        #: Under ``provision="verify"``: the topic check before a topic's first send.
        self.check = check

    def check_topic(self, name: str) -> None:
        """Every non-empty name is a topic here."""

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Enqueue every record, then wait once until the broker has all of them."""
        with self.hand_over:  # every record enqueued, in order, before the wait for their reports
            batch = await self._enqueue(topic, messages)
        await self.producer.wait(batch, timeout, f"publishing to {topic!r}")

    async def _enqueue(self, topic: str, messages: Sequence[OutboundMessage]) -> DeliveryBatch:
        """Enqueue every record of a send (waiting for room in the SDK's queue when it is full)."""
        owner = self.producer
        if owner.closed:
            raise ClosedError(f"cannot publish to {topic!r}: the publisher is closed")
        if self.transaction_open is False:
            raise TransactionError("publish on a transactional publisher needs begin() first")
        if self.check is not None:
            await self.check((topic,))
        loop = asyncio.get_running_loop()
        batch = DeliveryBatch(loop, len(messages))
        on_delivery = batch.on_delivery
        sdk_producer = owner.producer
        sent = 0
        total = len(messages)
        try:
            while True:
                sent = produce_all(sdk_producer, topic, messages, sent, on_delivery)
                if sent == total:
                    break
                owner.kick()  # the SDK's queue is full: serve reports, then go on from there
                await owner.wait_for_room()
                if owner.closed:
                    raise ClosedError(f"publishing to {topic!r} stopped: publisher closed") from None
        except sdk.confluent().KafkaException as exc:
            raise translate(exc, f"cannot publish to {topic!r}", PublishError) from exc
        finally:
            if sent:
                owner.kick()
        return batch

    async def close(self) -> None:
        """Flush what is queued, then release the producer."""
        await self.producer.close()


class KafkaPublisher(DriverPublisher):
    """A Publisher: one librdkafka producer shared by every topic handle.

    Given the backend's ``driver`` it is a shared publisher: the producer is the backend's, used by
    all its publishers, and ``close()`` waits for this publisher's sends (up to ``close_timeout``)
    without closing it. Without one it owns a driver over ``producer`` (a transactional publisher).
    """

    def __init__(
        self,
        producer: AsyncProducer,
        *,
        driver: KafkaPublishDriver | None = None,
        close_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        self._kafka = driver if driver is not None else KafkaPublishDriver(producer)
        self._producer = producer
        super().__init__(self._kafka, shared=driver is not None, close_timeout=close_timeout)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self._producer.name}>"

    producer: Forwarded[Any] = Forwarded(
        "_producer", "The confluent-kafka ``Producer`` underneath (escape hatch)."
    )

    def topic(self, name: str) -> DriverTopic:
        """The handle for topic ``name`` (cached)."""
        self._producer.check_open("get a topic")
        return super().topic(name)

    async def flush(self, timeout: float | None = None) -> int:
        """Wait until every enqueued record was delivered; returns how many are still queued.

        The producer is shared by the backend's publishers: this waits for their records too.
        """
        return await self._producer.flush(timeout)


class GroupMetadataSource(Protocol):
    """A group consumer whose offsets a transaction can commit (consume-transform-produce)."""

    async def group_metadata(self) -> Any:
        """The SDK's consumer group metadata of the member."""


class KafkaTransactionalPublisher(KafkaPublisher):
    """A TransactionalPublisher on a transactional producer (``transactional.id``).

    ``send_offsets`` commits a group consumer's offsets inside the transaction, so the consumed
    input and the produced output become visible together (consume-transform-produce). Reusing a
    ``transactional_id`` fences any older producer that used it.
    """

    def __init__(self, producer: AsyncProducer, transactional_id: str, operation_timeout: float) -> None:
        super().__init__(producer)
        self._kafka.transaction_open = False
        self.transactional_id = transactional_id
        self.operation_timeout = operation_timeout
        self._initialized = False

    @property
    def _open(self) -> bool:
        return bool(self._kafka.transaction_open)

    @_open.setter
    def _open(self, value: bool) -> None:
        self._kafka.transaction_open = value

    @staticmethod
    def new_id() -> str:
        """A unique transactional id (used when none is configured)."""
        return f"polybroker-txn-{uuid.uuid4().hex}"

    @property
    def in_transaction(self) -> bool:
        """True between ``begin()`` and ``commit()``/``abort()``."""
        return self._open

    async def _call(self, what: str, fn: Any, *args: Any) -> Any:
        try:
            return await self._producer.thread.submit(fn, *args)
        except sdk.confluent().KafkaException as exc:
            raise translate(exc, what, TransactionError) from exc

    async def begin(self) -> None:
        """Start a transaction (the first call registers the ``transactional.id`` with the broker)."""
        self._producer.check_open("begin a transaction")
        if self._open:
            raise TransactionError("a transaction is already open; commit or abort it first")
        producer = self._producer.producer
        if not self._initialized:
            await self._call("init_transactions failed", producer.init_transactions, self.operation_timeout)
            self._initialized = True
        try:
            producer.begin_transaction()
        except sdk.confluent().KafkaException as exc:
            raise translate(exc, "begin_transaction failed", TransactionError) from exc
        self._open = True

    async def send_offsets(
        self,
        consumer: GroupMetadataSource,
        offsets: Mapping[TopicPartition, int] | Iterable[Record],
    ) -> None:
        """Commit ``consumer``'s offsets as part of the transaction.

        ``offsets`` maps partitions to the next offset to read, or is the records handled (their
        highest offset + 1 per partition is committed).
        """
        if not self._open:
            raise TransactionError("send_offsets needs begin() first")
        ck = sdk.confluent()
        if isinstance(offsets, Mapping):
            positions = {TopicPartition(*tp): int(offset) for tp, offset in offsets.items()}
        else:
            positions = {}
            for record in offsets:
                tp = TopicPartition(record.topic, record.partition)
                positions[tp] = max(positions.get(tp, 0), record.offset + 1)
        if not positions:
            return
        metadata = await consumer.group_metadata()
        partitions = [ck.TopicPartition(tp.topic, tp.partition, offset) for tp, offset in positions.items()]
        await self._call(
            "send_offsets_to_transaction failed",
            self._producer.producer.send_offsets_to_transaction,
            partitions,
            metadata,
            self.operation_timeout,
        )

    async def commit(self) -> bool:
        """Commit; True when committed, False when the broker forced an abort (then aborted here)."""
        if not self._open:
            raise TransactionError("commit() without begin()")
        owner = self._producer
        await owner.flush(self.operation_timeout)
        producer = owner.producer
        for _attempt in range(3):
            try:
                await owner.thread.submit(producer.commit_transaction, self.operation_timeout)
            except sdk.confluent().KafkaException as exc:
                error = error_of(exc)
                if error is not None and error.retriable() and not error.txn_requires_abort():
                    continue
                if error is not None and error.txn_requires_abort():
                    log.warning("transaction %s must be aborted: %s", self.transactional_id, error.str())
                    await self._abort_now()
                    return False
                self._open = False
                raise translate(exc, "commit_transaction failed", TransactionError) from exc
            self._open = False
            return True
        await self._abort_now()
        return False

    async def _abort_now(self) -> None:
        owner = self._producer
        try:
            await owner.thread.submit(owner.producer.abort_transaction, self.operation_timeout)
        except sdk.confluent().KafkaException as exc:
            raise translate(exc, "abort_transaction failed", TransactionError) from exc
        finally:
            self._open = False
            await owner.flush(0)

    async def abort(self) -> bool:
        """Abort: the transaction's records are never visible to ``read_committed`` consumers."""
        if not self._open:
            raise TransactionError("abort() without begin()")
        await self._producer.flush(self.operation_timeout)
        for _attempt in range(3):
            try:
                await self._abort_now()
                return True
            except TransactionError as exc:
                error = error_of(exc.__cause__) if exc.__cause__ is not None else None
                if error is None or not error.retriable():
                    raise
        return False

    async def close(self) -> None:
        """Abort an open transaction, then close."""
        if self._open and not self._producer.closed:
            try:
                await self._abort_now()
            except Exception as exc:
                log.warning("aborting the open transaction at close failed: %r", exc)
        await super().close()
