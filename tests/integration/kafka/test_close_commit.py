"""A commit in ``on_revoked`` of a rebalance already queued when the consumer closes (Tansu).

The member below stops polling while a second member joins its group: librdkafka queues the eager
revoke for the next poll, and ``close()`` serves it. librdkafka's close does not wait for that
callback (the revoke was queued before the close): it unassigns and terminates the group
meanwhile, and a commit reaching the terminating group aborts the process (``wait_commit_cnt``
assertion in ``rd_kafka_cgrp_terminated``) or is never answered (a synchronous commit hangs the
close). Such a commit is refused unsent (``AckError``) instead, and the next member reads the
records again from the last commit: an allowed duplicate, nothing lost.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Sequence

import broker
from broker.backends.kafka import sdk
from broker.backends.kafka.backend import KafkaBackend
from broker.driver.devserver import ProcessServer
from broker.errors import AckError
from broker.log import LogConsumer, TopicPartition
from tests.integration.kafka.support import ONE_RECORD_PER_BATCH, TEST_QUERY, unique

CLOSE_TIMEOUT = 8.0
#: How often the listener tries its commit (an application retrying a failed commit).
ATTEMPTS = 3


class CommittingListener:
    """Commits ``offset`` for every revoked partition, as an application saving its progress would."""

    def __init__(self, offset: int) -> None:
        self.consumer: LogConsumer | None = None
        self.offset = offset
        self.revoked: list[TopicPartition] = []
        self.refused: list[AckError] = []

    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Nothing to do."""

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Commit the revoked partitions, trying again after a failure; refusals are recorded."""
        self.revoked.extend(partitions)
        assert self.consumer is not None
        for _ in range(ATTEMPTS):
            try:
                await self.consumer.commit(dict.fromkeys(partitions, self.offset))
                return
            except AckError as exc:
                self.refused.append(exc)


async def test_commit_in_on_revoked_of_a_rebalance_queued_before_close(tansu_server: ProcessServer) -> None:
    topic, group = unique("close-commit"), unique("group")
    tp = TopicPartition(topic, 0)
    backend = broker.connect(
        {
            "url": f"{tansu_server.url}?{TEST_QUERY}&close_timeout={CLOSE_TIMEOUT}",
            "producer_config": ONE_RECORD_PER_BATCH,
        }
    )
    assert isinstance(backend, KafkaBackend)
    async with backend, backend.log() as log:
        await log.create_topic(topic, 1)
        for i in range(4):
            await log.produce(topic, str(i).encode(), partition=0)
        listener = CommittingListener(offset=4)
        first = listener.consumer = log.consumer(group, [topic], listener=listener)
        records = []
        deadline = time.monotonic() + 15.0
        while len(records) < 4 and time.monotonic() < deadline:
            records.extend(await first.poll(4 - len(records), timeout=0.5))
        assert [r.value for r in records] == [b"0", b"1", b"2", b"3"]
        await first.commit({tp: 2})

        # A second member joins (a raw SDK consumer, polling on its own thread): its JoinGroup
        # starts a rebalance, which the first member, not polling, hears of at its next
        # heartbeats (every 0.3 s) and queues as a revoke.
        second = sdk.confluent().Consumer(
            {
                "bootstrap.servers": tansu_server.url.removeprefix("kafka://"),
                "group.id": group,
                "session.timeout.ms": 2000,
                "heartbeat.interval.ms": 300,
            }
        )
        second.subscribe([topic])
        stop = threading.Event()

        def poll_second() -> None:
            while not stop.is_set():
                second.poll(0.05)

        polling = threading.Thread(target=poll_second, daemon=True)
        polling.start()
        try:
            await asyncio.sleep(1.0)
            started = time.monotonic()
            await first.close()
            took = time.monotonic() - started
        finally:
            stop.set()
            await asyncio.to_thread(polling.join)
            await asyncio.to_thread(second.close)
        assert listener.revoked == [tp]
        assert took < CLOSE_TIMEOUT / 2, f"close took {took:.1f}s"
        committed = await log.committed(group, [tp])
        if listener.refused:  # the revoke queued before the close: refused unsent, read again from 2
            assert committed == {tp: 2}
            assert len(listener.refused) == ATTEMPTS
            for error in listener.refused:  # never sent into the terminating group
                assert "the group has already taken the partition back" in str(error), error
        else:  # the close's own revoke (the rebalance not heard yet): committed
            assert committed == {tp: 4}
