"""The Kafka backend: ``kafka://host:port[,host:port]`` on confluent-kafka (librdkafka)."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from typing import Any, ClassVar

from broker import Capabilities
from broker.backends.kafka.admin import KafkaAdmin
from broker.backends.kafka.backlog import group_backlog
from broker.backends.kafka.log import KafkaLog
from broker.backends.kafka.ping import ping
from broker.backends.kafka.provision import StartCheck, TopicCheck
from broker.backends.kafka.publisher import KafkaPublishDriver, KafkaPublisher, KafkaTransactionalPublisher
from broker.backends.kafka.queue import (
    QueueMessageIterator,
    RedeliveryTracker,
    open_messages,
)
from broker.backends.kafka.queue.settings import QueueSettings, queue_settings_for_topic
from broker.backends.kafka.rdkafka_config import common_config, consumer_config, producer_config
from broker.backends.kafka.records import KafkaBatchedIterator, KafkaRecordIterator
from broker.backends.kafka.registration import KafkaFactory
from broker.backends.kafka.sdk_consumer import GroupCore
from broker.backends.kafka.sdk_producer import AsyncProducer
from broker.backends.kafka.settings import ConsumerOptions, KafkaSettings
from broker.driver.base import BackendBase, Batching, topics_tuple
from broker.driver.options import build_consumer_options
from broker.driver.provision import Provision
from broker.errors import ConfigError
from broker.log import TopicPartition

__all__ = ["CAPABILITIES", "KafkaBackend"]

#: Kafka's log natively; per-message acknowledgement (``messages``) through the marker-topic queue
#: (the claims and their mechanisms are ``KafkaFactory.mechanisms``).
CAPABILITIES = Capabilities.claiming(
    KafkaFactory.mechanisms,
    # librdkafka's default message.max.bytes; START markers carry the payload plus ~100 bytes.
    max_message_bytes=1_000_000,
)

_names = itertools.count(1)

#: The default consumer-group prefix of the marker queue (``QueueSettings.group_prefix``).
_QUEUE_GROUP_PREFIX: str = str(
    next(f.default for f in dataclasses.fields(QueueSettings) if f.name == "group_prefix")
)


class KafkaBackend(BackendBase):
    """A connection to a Kafka cluster: publishers, group consumers, transactions, the log port."""

    name = "kafka"
    capabilities = CAPABILITIES
    #: ``messages()``' marker queue commits at fetch: its backlog leaves out messages in flight.
    backlog_counts_in_flight = False
    #: ``create``, ``verify`` and ``none``: :mod:`broker.backends.kafka.provision`.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: KafkaSettings) -> None:
        super().__init__()
        self.settings = settings
        self._check_provision()
        self._admin: KafkaAdmin | None = None
        #: (topic, subscription) -> the consumer group behind ``messages()`` (the queue's group).
        self._queue_groups: dict[tuple[str, str], str] = {}
        #: Under ``provision="verify"``: the topic check every publisher and consumer shares.
        self._topic_check: TopicCheck | None = None

    def __repr__(self) -> str:
        return f"<KafkaBackend {self.settings.servers}>"

    @property
    def admin(self) -> KafkaAdmin:
        """Topic and offset administration on this cluster."""
        if self._admin is None:
            self._admin = KafkaAdmin(
                common_config(self.settings),
                timeout=self.settings.operation_timeout,
                replication_factor=self.settings.replication_factor,
            )
        return self._admin

    async def close(self) -> None:
        """Close in order: queue consumers and trackers first (their last markers still go out),
        then everything else (publishers, record consumers, the logs they wrote through), then the
        admin connection. Idempotent."""
        if self._closed:
            return
        queue_parts = [r for r in self._resources if isinstance(r, QueueMessageIterator | RedeliveryTracker)]
        # One after the other: each writes its last markers while its log is still open, and a
        # member still in its first group join finishes it before leaving (GroupCore._before_leave).
        results: list[BaseException | None] = []
        for part in queue_parts:
            try:
                await part.close()
                results.append(None)
            except Exception as exc:
                results.append(exc)
        closed = {id(r) for r in queue_parts}
        self._resources = [r for r in self._resources if id(r) not in closed]
        await super().close()
        for result in results:
            if isinstance(result, Exception):
                raise result

    async def _ping(self, timeout: float) -> None:
        """A metadata request on a client of its own (see :mod:`broker.backends.kafka.ping`)."""
        await ping(common_config(self.settings), timeout)

    def _verifier(self) -> TopicCheck | None:
        """The shared topic check under ``provision="verify"`` (None under the other modes)."""
        if self.provision != "verify":
            return None
        if self._topic_check is None:
            self._topic_check = TopicCheck(self.admin)
        return self._topic_check

    def _check_at_start(self, consumer: StartCheck, topics: Sequence[str]) -> None:
        """Under ``verify``: ``consumer`` checks ``topics`` when it starts."""
        check = self._verifier()
        if check is not None:
            names = tuple(topics)
            consumer.start_check = lambda: check(names)

    async def _close_connection(self) -> None:
        if self._admin is not None:
            await self._admin.close()
            self._admin = None

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return build_consumer_options(
            ConsumerOptions, self.settings, options, native_names={}, backend="kafka"
        )

    def _group_name(self, group: str | None) -> str:
        group = group or self.settings.group_id
        if not group:
            raise ConfigError("a consumer group is needed: pass group=... or set group_id in the URL")
        return group

    def publisher(self) -> KafkaPublisher:
        """A publisher on the backend's one idempotent producer, shared by every publisher.

        Asking for one costs no connection; its ``close()`` waits for its own sends and leaves the
        producer open; the backend's ``close()`` flushes and closes the producer.
        """
        driver: KafkaPublishDriver = self._shared_driver(self._new_publish_driver)
        return self._track(  # type: ignore[no-any-return]
            KafkaPublisher(driver.producer, driver=driver, close_timeout=self.settings.close_timeout)
        )

    def _new_publish_driver(self) -> KafkaPublishDriver:
        producer = AsyncProducer(
            producer_config(self.settings),
            name=f"producer-{next(_names)}",
            close_timeout=self.settings.close_timeout,
        )
        return KafkaPublishDriver(producer, self._verifier())

    def transactional_publisher(
        self, transactional_id: str | None = None, **options: Any
    ) -> KafkaTransactionalPublisher:
        """A publisher whose records become visible on ``commit()``; see ``send_offsets``.

        ``transactional_id`` (default: ``settings.transactional_id``, else a unique id) identifies the
        producer across restarts: a new producer with the same id fences the old one.
        """
        if options:
            raise ConfigError(f"unknown transactional publisher options: {', '.join(sorted(options))}")
        self._check_open()
        txn_id = transactional_id or self.settings.transactional_id or KafkaTransactionalPublisher.new_id()
        producer = AsyncProducer(
            producer_config(self.settings, transactional_id=txn_id),
            name=f"txn-producer-{next(_names)}",
            close_timeout=self.settings.close_timeout,
        )
        publisher = KafkaTransactionalPublisher(producer, txn_id, self.settings.operation_timeout)
        publisher._kafka.check = self._verifier()
        return self._track(publisher)  # type: ignore[no-any-return]

    def _core(self, topics: str | Sequence[str], group: str | None, options: ConsumerOptions) -> GroupCore:
        names = topics_tuple(topics)
        group = self._group_name(group)
        core = GroupCore(
            consumer_config(self.settings, options, group),
            names,
            name=f"{group}-{next(_names)}",
            prefetch=options.batch_size,
            close_timeout=self.settings.close_timeout,
            cooperative=options.cooperative,
        )
        core.ack_waits = False  # Record.ack() queues its commit; the iterator's commit() waits
        return core

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: ConsumerOptions, batching: Batching | None
    ) -> KafkaRecordIterator:
        """Consume ``topics`` as a member of ``group`` (default: the ``group_id`` setting).

        ``Record.ack()`` queues the commit of its offset and returns; ``await iterator.commit()``
        waits until the broker has every commit acked so far (see ``broker.backends.kafka.records``).
        Options override the connection's consumer settings: ``start``, ``batch_size``,
        ``isolation_level``, ``session_timeout``, ``fetch_max_wait``, ... (see ``ConsumerOptions``).
        A batch is what is ready at once, else what arrives within the batch timeout.
        """
        iterator: KafkaRecordIterator
        if batching is None:
            iterator = KafkaRecordIterator(self._core(topics, group, options), options.batch_size, 1.0)
        else:
            options = dataclasses.replace(options, batch_size=batching.size)  # the fetch size too
            iterator = KafkaBatchedIterator(
                self._core(topics, group, options), batching.size, batching.timeout
            )
        self._check_at_start(iterator, topics)
        return iterator

    def _message_options(self, options: dict[str, Any]) -> dict[str, Any]:
        """``messages()`` takes the marker queue's options, read by ``queue_settings_for_topic``."""
        return options

    def _open_messages(
        self, topic: str, subscription: str, options: dict[str, Any], batching: Batching | None
    ) -> QueueMessageIterator:
        """Per-message acknowledgement on ``topic`` through the marker-topic queue.

        Every subscription sees every message of the topic; consumers of one subscription split the
        partitions. ``ack()`` writes an END marker, ``nack(delay)`` asks for redelivery after
        ``delay``, ``in_progress()`` a KEEPALIVE; a message neither settled nor kept alive for
        ``ack_deadline`` seconds (default 60) is redelivered by a tracker. Each consumer runs one
        (``embedded_tracker=False`` to run them apart: ``queue_tracker()`` / ``broker queue
        tracker``). The other options are the fields of
        :class:`~broker.backends.kafka.queue.QueueSettings`. ``batched_messages()`` hands out
        batches of what the consumer has buffered (up to ``batch_size``, default 100). What a
        crash costs in delivery attempts is on ``docs/kafka-queue.md``.
        """
        if not subscription:
            raise ConfigError("a subscription name is needed")
        embedded = options.pop("embedded_tracker", True)
        if not isinstance(embedded, bool):
            embedded = str(embedded).lower() in ("1", "true", "yes", "on")
        config = queue_settings_for_topic(topic, self._queue_timeouts(options))
        self._queue_groups[(topic, subscription)] = f"{config.group_prefix}{subscription}"
        iterator = open_messages(
            self.log(),
            config,
            subscription,
            embedded_tracker=embedded,
            batch_size=None if batching is None else batching.size,
            batch_timeout=1.0 if batching is None else batching.timeout,
        )
        letters = () if config.dead_letter_topic is None else (config.dead_letter_topic,)
        self._check_at_start(iterator, (config.message_topic, config.marker_topic, *letters))
        return iterator

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """Records of ``topic`` the group has not committed: high watermark - committed, summed.

        ``subscription`` is a ``records()`` group, or a ``messages()`` subscription: then the
        group is the marker queue's (``group_prefix + subscription``, by default
        ``kafka-mq-<subscription>``; the queue commits when a batch is fetched, so messages in
        flight are not counted). For a subscription this backend did not open, the queue's group
        is used when it committed offsets of ``topic``, else ``subscription`` as a group. A group
        that committed nothing counts every retained record. ``UnknownTopic`` for a missing topic.
        See :mod:`broker.backends.kafka.backlog`.
        """
        self._check_open()
        admin = self.admin
        group = self._queue_groups.get((topic, subscription))
        if group is None:
            group = subscription
            queue_group = f"{_QUEUE_GROUP_PREFIX}{subscription}"
            count = await admin.partitions(topic)
            committed = await admin.committed(queue_group, [TopicPartition(topic, p) for p in range(count)])
            if any(offset is not None for offset in committed.values()):
                group = queue_group
        return await group_backlog(admin, topic, group)

    def _queue_timeouts(self, options: dict[str, Any]) -> dict[str, Any]:
        """``options`` with the queue's operation and close timeouts defaulting to this backend's."""
        return {
            "operation_timeout": self.settings.operation_timeout,
            "close_timeout": self.settings.close_timeout,
            **options,
        }

    def queue_tracker(self, topic: str, **options: Any) -> RedeliveryTracker:
        """A redelivery tracker for the marker queue on ``topic`` (options as for :meth:`messages`)."""
        self._check_open()
        tracker = RedeliveryTracker(
            self.log(), queue_settings_for_topic(topic, self._queue_timeouts(options))
        )
        return self._track(tracker)  # type: ignore[no-any-return]

    def log(self) -> KafkaLog:
        """The ``broker.log`` port on this cluster."""
        self._check_open()
        return self._track(KafkaLog(self.settings, self.admin))  # type: ignore[no-any-return]
