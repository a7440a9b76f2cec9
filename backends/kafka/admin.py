"""Cluster metadata and administration without blocking the event loop.

confluent-kafka's ``AdminClient`` answers with ``concurrent.futures`` that a background thread
completes; they are awaited here through ``asyncio.wrap_future``. Watermarks come from
``list_offsets`` (earliest and latest), so no consumer is needed to read them.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.errors import error_of, translate
from broker.errors import BrokerError, ClosedError, ConfigError, UnknownTopic
from broker.log import TopicPartition

__all__ = ["KafkaAdmin"]


class KafkaAdmin:
    """Topic creation, partition counts, watermarks and committed offsets of a cluster."""

    def __init__(self, config: dict[str, Any], *, timeout: float, replication_factor: int = -1) -> None:
        self._config = config
        self.timeout = timeout
        self.replication_factor = replication_factor
        self._client: Any = None
        self._closed = False
        #: Requests sent and not answered: the client is released only after them (or a timeout).
        self._pending: set[concurrent.futures.Future[Any]] = set()

    @property
    def client(self) -> Any:
        """The confluent-kafka ``AdminClient`` (created on first use; ``ClosedError`` once closed)."""
        if self._closed:
            raise ClosedError("the Kafka admin client is closed")
        if self._client is None:
            admin = sdk.admin_module()
            try:
                self._client = admin.AdminClient(self._config)
            except sdk.confluent().KafkaException as exc:
                raise translate(exc, "cannot create a Kafka admin client") from exc
        return self._client

    def _sent(self, futures: dict[Any, Any]) -> dict[Any, Any]:
        """Remember the requests in ``futures`` until they are answered (see :meth:`close`)."""
        pending = self._pending
        for future in futures.values():
            pending.add(future)
            future.add_done_callback(pending.discard)
        return futures

    async def _result(self, future: Any, what: str, default: type[BrokerError] = BrokerError) -> Any:
        try:
            async with asyncio.timeout(self.timeout + 1):
                return await asyncio.wrap_future(future)
        except TimeoutError:
            raise translate(TimeoutError(f"no answer within {self.timeout}s"), what, default) from None
        except sdk.confluent().KafkaException as exc:
            raise translate(exc, what, default) from exc

    async def create_topic(
        self, name: str, partitions: int = 1, *, config: Mapping[str, str] | None = None
    ) -> None:
        """Create ``name``; a no-op when it exists with ``partitions`` partitions, else ConfigError."""
        if not isinstance(name, str) or not name:
            raise ConfigError(f"a topic name must be a non-empty string, got {name!r}")
        if partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {partitions}")
        admin = sdk.admin_module()
        topic = admin.NewTopic(
            name, partitions, self.replication_factor, config={k: str(v) for k, v in (config or {}).items()}
        )
        futures = self._sent(
            self.client.create_topics([topic], operation_timeout=self.timeout, request_timeout=self.timeout)
        )
        try:
            await asyncio.wrap_future(futures[name])
        except sdk.confluent().KafkaException as exc:
            error = error_of(exc)
            if error is None or error.name() != "TOPIC_ALREADY_EXISTS":
                raise translate(exc, f"cannot create topic {name!r}", ConfigError) from exc
            existing = await self.partitions(name)
            if existing != partitions:
                raise ConfigError(
                    f"topic {name!r} exists with {existing} partitions, not {partitions}"
                ) from exc

    async def partitions(self, topic: str) -> int:
        """The partition count of ``topic`` (``UnknownTopic`` when it does not exist)."""
        ck = sdk.confluent()
        futures = self._sent(
            self.client.describe_topics(ck.TopicCollection([topic]), request_timeout=self.timeout)
        )
        description = await self._result(futures[topic], f"cannot describe topic {topic!r}", UnknownTopic)
        return len(description.partitions)

    async def watermarks_many(
        self, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, tuple[int, int]]:
        """``(low, high)`` per partition: the first retained offset and the next offset to be written."""
        if not partitions:
            return {}
        ck = sdk.confluent()
        admin = sdk.admin_module()
        uncommitted = ck.IsolationLevel.READ_UNCOMMITTED
        client = self.client
        low = self._sent(
            client.list_offsets(
                {ck.TopicPartition(tp[0], tp[1]): admin.OffsetSpec.earliest() for tp in partitions},
                isolation_level=uncommitted,
                request_timeout=self.timeout,
            )
        )
        high = self._sent(
            client.list_offsets(
                {ck.TopicPartition(tp[0], tp[1]): admin.OffsetSpec.latest() for tp in partitions},
                isolation_level=uncommitted,
                request_timeout=self.timeout,
            )
        )
        out: dict[TopicPartition, tuple[int, int]] = {}
        for sdk_tp, low_future in low.items():
            tp = TopicPartition(sdk_tp.topic, sdk_tp.partition)
            what = f"cannot read the watermarks of {tp}"
            first = await self._result(low_future, what, UnknownTopic)
            last = await self._result(high[sdk_tp], what, UnknownTopic)
            out[tp] = (first.offset, last.offset)
        return out

    async def watermarks(self, partition: TopicPartition) -> tuple[int, int]:
        """``(low, high)`` of one partition."""
        tp = TopicPartition(partition[0], partition[1])
        return (await self.watermarks_many([tp]))[tp]

    async def committed(
        self, group: str, partitions: Sequence[TopicPartition]
    ) -> dict[TopicPartition, int | None]:
        """The committed offsets of ``group`` (None where nothing was committed)."""
        if not partitions:
            return {}
        ck = sdk.confluent()
        request = ck.ConsumerGroupTopicPartitions(
            group, [ck.TopicPartition(tp[0], tp[1]) for tp in partitions]
        )
        futures = self._sent(self.client.list_consumer_group_offsets([request], request_timeout=self.timeout))
        answer = await self._result(futures[group], f"cannot read the offsets of group {group!r}")
        found = {
            (p.topic, p.partition): (p.offset if p.offset >= 0 else None) for p in answer.topic_partitions
        }
        return {TopicPartition(tp[0], tp[1]): found.get((tp[0], tp[1])) for tp in partitions}

    async def close(self) -> None:
        """Release the admin client (its connections close in a background thread). Idempotent.

        Requests still unanswered are waited for by that thread, not by ``close()`` (at most the
        request timeout): the SDK's client is never destroyed under a request of its own, and a
        broker that never answers (gone, or refusing this client's login) cannot hold up the
        application's shutdown. Later calls raise ``ClosedError``.
        """
        self._closed = True
        pending = list(self._pending)
        client, self._client = self._client, None
        if client is not None:
            threading.Thread(
                target=_release, args=(client, pending, self.timeout + 1), daemon=True
            ).start()
            del client

    async def missing_topics(self, topics: Iterable[str]) -> list[str]:
        """The names among ``topics`` the cluster does not have, asked in one ``describe_topics``
        request (a metadata request that never auto-creates a topic)."""
        names = list(dict.fromkeys(topics))
        if not names:
            return []
        ck = sdk.confluent()
        futures = self._sent(
            self.client.describe_topics(ck.TopicCollection(names), request_timeout=self.timeout)
        )
        missing = []
        for name in names:
            try:
                await self._result(futures[name], f"cannot describe topic {name!r}")
            except UnknownTopic:  # only the broker's "unknown topic" answer: other errors raise
                missing.append(name)
        return missing

    async def topic_exists(self, topic: str) -> bool:
        """True when ``topic`` exists (asks without creating it)."""
        try:
            await self.partitions(topic)
        except UnknownTopic:
            return False
        return True


def _release(client: Any, pending: list[concurrent.futures.Future[Any]], timeout: float) -> None:
    """Wait (at most ``timeout``) for the client's unanswered requests, then drop the last reference,
    from a worker thread: librdkafka's teardown never blocks the loop, nor runs under a request."""
    if pending:
        concurrent.futures.wait(pending, timeout=timeout)
    del client
