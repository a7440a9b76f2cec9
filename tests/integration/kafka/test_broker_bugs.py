"""Behaviour the library needs that Tansu 0.6 gets wrong, reproduced with the raw confluent-kafka client.

Each test is a strict expected failure on Tansu (the marker names the bug): it passes on Apache Kafka.
Our own tests that meet the same defect (``test_transactions.py``, the Kafka conformance run) carry
the same marker, so a fixed Tansu turns all of them into strict XPASS failures at once.
"""

from __future__ import annotations

import time

import pytest
from confluent_kafka import Consumer, Producer  # type: ignore[import-untyped]
from confluent_kafka.admin import AdminClient, NewTopic  # type: ignore[import-untyped]

from broker.driver.devserver import ProcessServer
from tests.integration.kafka.support import TANSU_ABORTED_VISIBLE_BUG, unique


def _create_topic(bootstrap: str, topic: str) -> None:
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(topic, 1, 1)]).values():
        future.result(15)


def _read_committed(bootstrap: str, topic: str, quiet: float) -> list[bytes]:
    """Every value a read_committed group reads, until ``quiet`` seconds pass without one after the first."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": unique("raw"),
            "auto.offset.reset": "earliest",
            "isolation.level": "read_committed",
            "enable.auto.commit": False,
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 300,
            "fetch.wait.max.ms": 100,
        }
    )
    try:
        consumer.subscribe([topic])
        values: list[bytes] = []
        deadline = time.monotonic() + 20
        last = float("inf")  # the quiet time counts from the first record (a group join takes seconds)
        while time.monotonic() < deadline and time.monotonic() - last < quiet:
            message = consumer.poll(0.2)
            if message is None or message.error():
                continue
            values.append(message.value())
            last = time.monotonic()
        return values
    finally:
        consumer.close()


@pytest.mark.xfail(reason=TANSU_ABORTED_VISIBLE_BUG, strict=True)
def test_raw_client_aborted_records_are_invisible_to_read_committed(tansu_server: ProcessServer) -> None:
    bootstrap = tansu_server.url.removeprefix("kafka://")
    topic = unique("raw-abort")
    _create_topic(bootstrap, topic)
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("raw-txn")})
    producer.init_transactions(15)
    producer.begin_transaction()
    producer.produce(topic, b"aborted")
    # Delivered before the abort, as a transactional publish() returns once the broker has it
    # (an abort before delivery only purges the client's queue and proves nothing).
    assert producer.flush(15) == 0
    producer.abort_transaction(15)
    producer.begin_transaction()
    producer.produce(topic, b"committed")
    producer.commit_transaction(15)
    assert _read_committed(bootstrap, topic, quiet=3.0) == [b"committed"]
