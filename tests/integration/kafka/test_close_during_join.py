"""Closing a group member whose join cannot finish returns promptly (Tansu).

A join can stay unfinished for good: on Tansu when another member of the group never rejoins (below:
a raw confluent-kafka member that stops polling during the rebalance), and when its coordinator does
not complete the next join of a group whose members all left (which made every close of two
``messages()`` subscriptions of one topic, whose trackers share a group, take ``close_timeout``).
``close()`` serves a join in flight for a bounded time before leaving
(``GroupCore.join_wait``): a few session timeouts, not the whole ``close_timeout``.
"""

from __future__ import annotations

import asyncio
import threading
import time

import broker
from broker.backends.kafka import sdk
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.records import KafkaRecordIterator
from broker.driver.devserver import ProcessServer
from tests.integration.kafka.support import TEST_QUERY, unique

#: Long, so that a close waiting for it stands out from one bounded by the session timeout.
CLOSE_TIMEOUT = 20.0


async def test_close_with_a_join_that_cannot_finish_does_not_wait_for_close_timeout(
    tansu_server: ProcessServer,
) -> None:
    topic, group = unique("stuck-join"), unique("group")
    backend = broker.connect(f"{tansu_server.url}?{TEST_QUERY}&close_timeout={CLOSE_TIMEOUT}")
    assert isinstance(backend, KafkaBackend)
    bootstrap = tansu_server.url.removeprefix("kafka://")
    async with backend:
        await backend.admin.create_topic(topic, 2)
        other = sdk.confluent().Consumer(
            {
                "bootstrap.servers": bootstrap,
                "group.id": group,
                "session.timeout.ms": 1000,
                "heartbeat.interval.ms": 300,
                "max.poll.interval.ms": 60000,
            }
        )
        assigned = threading.Event()
        # With a revoke callback librdkafka waits for poll() to serve the rebalance: a member that
        # stops polling never rejoins, so no later join of the group completes.
        other.subscribe(
            [topic], on_assign=lambda consumer, partitions: assigned.set(), on_revoke=lambda *_: None
        )

        def poll_until_assigned() -> None:
            deadline = time.monotonic() + 15.0
            while not assigned.is_set() and time.monotonic() < deadline:
                other.poll(0.05)

        try:
            await asyncio.to_thread(poll_until_assigned)
            assert assigned.is_set(), "the raw member was never assigned"
            member = backend.records(topic, group=group, session_timeout=1.0, heartbeat_interval=0.3)
            assert isinstance(member, KafkaRecordIterator)
            loop = asyncio.get_running_loop()
            async with member:  # subscribed: its join waits for the raw member, which never rejoins
                began = loop.time()
            closed_in = loop.time() - began
            assert not member._core.joined, "the join finished: the test did not set up a stuck join"
            assert closed_in < CLOSE_TIMEOUT / 2, (
                f"closing a member whose join cannot finish took {closed_in:.1f}s "
                f"(close_timeout {CLOSE_TIMEOUT}s, session timeout 1s)"
            )
        finally:
            await asyncio.to_thread(other.close)
