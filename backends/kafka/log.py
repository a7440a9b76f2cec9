"""The ``broker.log`` port on Kafka: topics, partitions, watermarks, producing, groups, readers.

The marker queue and the stream processor run on this port; ``broker.backends.inmem.log`` is its
in-memory twin, and the same behaviours are tested on both.

Producing goes through one idempotent producer (its delivery reports resolve the futures
``send`` returns); admin requests go through ``AdminClient``; each consumer and reader owns a
confluent-kafka ``Consumer`` and its worker thread.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from collections.abc import Awaitable, Mapping, Sequence
from typing import Any, Generic, TypeVar

from broker import Record
from broker.backends.kafka import sdk
from broker.backends.kafka.admin import KafkaAdmin
from broker.backends.kafka.errors import translate
from broker.backends.kafka.mapping import produce, raw_fields
from broker.backends.kafka.rdkafka_config import (
    common_config,
    consumer_config,
    producer_config,
    reader_config,
)
from broker.backends.kafka.sdk_consumer import GroupCore, ReaderCore
from broker.backends.kafka.sdk_producer import AsyncProducer
from broker.backends.kafka.settings import KafkaSettings
from broker.backends.kafka.threads import reject, resolve
from broker.driver.log_base import LogBase
from broker.driver.provision import Provision
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError, PublishError, Timeout
from broker.log import RawFields, ReadHints, RebalanceListener, StartPosition, TopicPartition

__all__ = ["KafkaLog", "KafkaLogConsumer", "KafkaLogReader"]

log = logging.getLogger("broker.backends.kafka")

_names = itertools.count(1)

#: The shortest group session timeout a Kafka broker accepts by default (group.min.session.timeout.ms).
MIN_SESSION_TIMEOUT = 6.0
#: The longest session a ``ReadHints.failure_timeout`` asks for (Kafka's default before 3.0).
MAX_SESSION_TIMEOUT = 10.0


class _RecordDelivery:
    """The delivery callback of one record: resolves ``(TopicPartition, offset)``."""

    __slots__ = ("future", "loop", "topic")

    def __init__(self, loop: asyncio.AbstractEventLoop, topic: str) -> None:
        self.loop = loop
        self.topic = topic
        self.future: asyncio.Future[tuple[TopicPartition, int]] = loop.create_future()

    def on_delivery(self, err: Any, msg: Any) -> None:
        # Reports are served by the producer's pump on the loop thread (resolve at once, no
        # self-pipe write), or by a flush on a worker thread (hand over thread-safely).
        on_loop = asyncio._get_running_loop() is self.loop
        if err is not None:
            exc = translate(err, f"producing to {self.topic!r} failed", PublishError)
            if on_loop:
                reject(self.future, exc)
            else:
                self.loop.call_soon_threadsafe(reject, self.future, exc)
        else:
            result = (TopicPartition(msg.topic(), msg.partition()), msg.offset())
            if on_loop:
                resolve(self.future, result)
            else:
                self.loop.call_soon_threadsafe(resolve, self.future, result)


_Core = TypeVar("_Core", GroupCore, ReaderCore)


class _CoreClient(AsyncResource, Generic[_Core]):
    """What a group member and a reader share: reading, seeking and pausing through their core."""

    def __init__(self, core: _Core) -> None:
        self.core: _Core = core

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (a group member inside ``on_assigned``: start there)."""
        self.core.seek(partition, offset)

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` until resumed."""
        self.core.pause(partitions)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""
        self.core.resume(partitions)

    async def poll(self, max_records: int = 500, timeout: float | None = None) -> list[Record]:
        """Up to ``max_records`` records from the assigned partitions; ``[]`` after ``timeout``.

        A group member's rebalances (and its listener's callbacks) happen inside this call.
        """
        return await self.core.records(max_records, timeout)

    async def close(self) -> None:
        """Stop reading. Idempotent.

        A group member first commits what is pending and leaves the group (its listener hears
        ``on_revoked``).
        """
        await self.core.close()


class KafkaLogConsumer(_CoreClient[GroupCore]):
    """A LogConsumer: a member of a Kafka consumer group."""

    def __init__(self, core: GroupCore) -> None:
        super().__init__(core)
        #: How to read what :meth:`fetch_raw` returns (``broker.log.RawBatches``).
        self.raw_fields: RawFields = raw_fields()

    def __repr__(self) -> str:
        return f"<KafkaLogConsumer group={self.core.group!r} topics={list(self.core.topics)}>"

    async def fetch_raw(self, max_records: int, timeout: float | None) -> Sequence[Any]:
        """Up to ``max_records`` confluent-kafka messages, no Record built (``broker.log.RawBatches``)."""
        return await self.core.fetch(max_records, timeout)

    def single_partition(self) -> bool:
        """True when exactly one partition is assigned."""
        return len(self.core.assigned) == 1

    async def commit(self, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit, per partition, the next offset to read (partitions no longer owned are skipped)."""
        await self.core.commit({(tp[0], tp[1]): offset for tp, offset in offsets.items()})

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions currently assigned to this member."""
        return frozenset(TopicPartition(*tp) for tp in self.core.assigned)

    async def group_metadata(self) -> Any:
        """The SDK's group metadata, for ``KafkaTransactionalPublisher.send_offsets``."""
        return await self.core.group_metadata()


class KafkaLogReader(_CoreClient[ReaderCore]):
    """A LogReader: assigned partitions, explicit positions, no group, no commits."""

    def __repr__(self) -> str:
        return f"<KafkaLogReader {sorted(self.core.positions)}>"

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Add partitions to read, each from an offset (or OFFSET_BEGINNING / OFFSET_END)."""
        self.core.assign(positions)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop reading ``partitions``."""
        self.core.unassign(partitions)

    def position(self, partition: TopicPartition) -> int:
        """The next offset returned for ``partition`` (see :meth:`ReaderCore.position`)."""
        return self.core.position(partition)

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions this reader reads."""
        return frozenset(TopicPartition(*tp) for tp in self.core.positions)


class KafkaLog(LogBase):
    """The ``broker.log.Log`` port on a Kafka cluster."""

    closed_message = "the Kafka log is closed"

    def __init__(self, settings: KafkaSettings, admin: KafkaAdmin | None = None) -> None:
        self.settings = settings
        self._own_admin = admin is None
        self.admin = admin or KafkaAdmin(
            common_config(settings),
            timeout=settings.operation_timeout,
            replication_factor=settings.replication_factor,
        )
        self._producer: AsyncProducer | None = None
        #: Producers of sends that asked for a ``client_id`` of their own, by that id.
        self._client_producers: dict[str, AsyncProducer] = {}
        self._children: list[AsyncResource] = []
        self._later: set[asyncio.Task[None]] = set()
        self._closed = False

    def __repr__(self) -> str:
        return f"<KafkaLog {self.settings.servers}>"

    @property
    def provision(self) -> Provision:
        """The connection's ``provision`` mode: the marker queue creates its topics only under
        ``create`` (an explicit :meth:`create_topic` creates under every mode)."""
        return self.settings.provision

    @property
    def producer(self) -> AsyncProducer:
        """The producer behind ``send``/``produce`` (created on first use)."""
        if self._producer is None:
            self._producer = AsyncProducer(
                producer_config(self.settings),
                name=f"log-producer-{next(_names)}",
                close_timeout=self.settings.close_timeout,
            )
        return self._producer

    def _producer_for(self, client_id: str | None) -> AsyncProducer:
        """The shared producer, or the one reporting ``client_id`` (created on first use)."""
        if client_id is None or client_id == self.settings.client_id:
            return self.producer
        owner = self._client_producers.get(client_id)
        if owner is None:
            config = producer_config(self.settings)
            config["client.id"] = client_id
            owner = self._client_producers[client_id] = AsyncProducer(
                config,
                name=f"log-producer-{client_id}-{next(_names)}",
                close_timeout=self.settings.close_timeout,
            )
        return owner

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name``; a no-op when it exists with the same partition count (else ConfigError).

        ``config`` carries topic settings such as ``{"cleanup.policy": "compact"}``.
        """
        self._check()
        await self.admin.create_topic(name, partitions, config=config)

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (``UnknownTopic`` if it does not exist)."""
        self._check()
        return await self.admin.partitions(topic)

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        """``(low, high)``: the first retained offset and the offset the next record will get."""
        self._check()
        return await self.admin.watermarks(partition)

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        """Queue one record without waiting; await the result for ``(TopicPartition, offset)``.

        ``partition=None`` picks the partition from the key (murmur2) or spreads unkeyed records.
        ``value=None`` writes a tombstone. ``client_id`` sends through a producer of its own whose
        ``client.id`` is that id (one per id, kept until the log closes).
        """
        self._check_send(value, key, attributes)
        owner = self._producer_for(client_id)
        owner.check_open("produce")
        loop = asyncio.get_running_loop()
        delivery = _RecordDelivery(loop, topic)
        target = -1 if partition is None else partition
        ck = sdk.confluent()
        try:
            produce(owner.producer, topic, value, key, attributes, delivery.on_delivery, target)
        except BufferError:
            task = loop.create_task(self._send_later(owner, delivery, topic, value, key, target, attributes))
            self._later.add(task)
            task.add_done_callback(self._later.discard)
            return delivery.future
        except ck.KafkaException as exc:
            raise translate(exc, f"cannot produce to {topic!r}", PublishError) from exc
        owner.kick()
        return delivery.future

    async def _send_later(
        self,
        owner: AsyncProducer,
        delivery: _RecordDelivery,
        topic: str,
        value: Any,
        key: Any,
        partition: int,
        attributes: Any,
    ) -> None:
        while not owner.closed:
            await owner.wait_for_room()
            try:
                produce(owner.producer, topic, value, key, attributes, delivery.on_delivery, partition)
            except BufferError:
                continue
            except Exception as exc:
                reject(delivery.future, translate(exc, f"cannot produce to {topic!r}", PublishError))
                return
            owner.kick()
            return
        reject(delivery.future, ClosedError("the Kafka log closed before the record was queued"))

    async def flush(self, timeout: float | None = None) -> None:
        """Wait until every queued record was written (``Timeout`` if some remain after ``timeout``)."""
        self._check()
        owners = [p for p in (self._producer, *self._client_producers.values()) if p is not None]
        if not owners:
            return
        remaining = sum(await asyncio.gather(*(owner.flush(timeout) for owner in owners)))
        if remaining:
            raise Timeout(f"{remaining} record(s) still queued after {timeout}s")

    def consumer(
        self,
        group: str,
        topics: Sequence[str],
        *,
        start: StartPosition = "earliest",
        listener: RebalanceListener | None = None,
        client_id: str | None = None,
        hints: ReadHints | None = None,
        **options: Any,
    ) -> KafkaLogConsumer:
        """Join ``group`` reading ``topics``; assignment changes reach ``listener``.

        ``client_id`` sets this member's ``client.id`` (default: the connection's ``client_id``).
        ``hints`` become consumer settings (see :meth:`hinted`); ``options`` override the
        connection's consumer settings and the hints (``session_timeout``, ...). A topic
        that does not exist yet is picked up at librdkafka's next metadata refresh
        (``topic.metadata.refresh.interval.ms``, 5 minutes unless ``consumer_config`` lowers it).
        """
        self._check()
        hinted = self.hinted(hints)
        hinted.pop("start", None)  # a member's out-of-range position is its ``start``
        opts = self.settings.consumer_options(start=start, **{**hinted, **options})
        config = consumer_config(self.settings, opts, group)
        if client_id is not None:
            config["client.id"] = client_id
        core = GroupCore(
            config,
            list(topics),
            name=f"log-{group}-{next(_names)}",
            prefetch=opts.batch_size,
            close_timeout=self.settings.close_timeout,
            listener=listener,
            cooperative=opts.cooperative,
        )
        return self._adopt(KafkaLogConsumer(core))

    def reader(
        self, *, client_id: str | None = None, hints: ReadHints | None = None, **options: Any
    ) -> KafkaLogReader:
        """A reader outside any group (``hints``, then ``options`` override the consumer settings).

        ``client_id`` sets the reader's ``client.id`` (default: the connection's ``client_id``).
        """
        self._check()
        opts = self.settings.consumer_options(**{**self.hinted(hints), **options})
        config = reader_config(self.settings, opts)
        if client_id is not None:
            config["client.id"] = client_id
        core = ReaderCore(
            config,
            name=f"log-reader-{next(_names)}",
            prefetch=opts.batch_size,
            close_timeout=self.settings.close_timeout,
        )
        return self._adopt(KafkaLogReader(core))

    def hinted(self, hints: ReadHints | None) -> dict[str, Any]:
        """The consumer settings ``hints`` ask for, within this connection's bounds.

        ``max_wait`` -> ``fetch_max_wait``; ``min_bytes`` -> ``fetch_min_bytes``;
        ``out_of_range`` -> ``start`` (``auto.offset.reset``); ``failure_timeout`` -> a session
        timeout between the broker's default minimum (6 s) and 10 s, never above the connection's
        ``session_timeout``, with heartbeats at most a third of it (they come from librdkafka's own
        thread, so a slow handler never misses one).
        """
        if hints is None:
            return {}
        options: dict[str, Any] = {}
        if hints.max_wait is not None:
            options["fetch_max_wait"] = hints.max_wait
        if hints.min_bytes is not None:
            options["fetch_min_bytes"] = hints.min_bytes
        if hints.out_of_range is not None:
            options["start"] = hints.out_of_range
        if hints.failure_timeout is not None:
            wanted = min(max(hints.failure_timeout, MIN_SESSION_TIMEOUT), MAX_SESSION_TIMEOUT)
            session = min(self.settings.session_timeout, wanted)
            options["session_timeout"] = session
            options["heartbeat_interval"] = min(self.settings.heartbeat_interval, session / 3)
        return options

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group`` (None where nothing was committed)."""
        self._check()
        return await self.admin.committed(group, partitions)

    async def _release(self) -> None:
        """Flush and close the producers, then the admin client this log made."""
        if self._producer is not None:
            await self._producer.close()
        extra, self._client_producers = list(self._client_producers.values()), {}
        for owner in extra:
            await owner.close()
        if self._own_admin:
            await self.admin.close()
