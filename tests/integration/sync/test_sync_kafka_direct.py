"""Blocking publishes on Kafka, on a real Tansu: many threads publishing lose nothing and keep each
thread's order per key; a full producer queue is waited out; a publisher whose queue stays full (the
broker down) raises ``Timeout`` within the call's ``timeout``, with the message not handed over; a
``multiprocessing`` child flushes what it published before it ends.
"""

from __future__ import annotations

import multiprocessing
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer, free_port
from broker.errors import Timeout
from tests.conformance.test_kafka import kafka_server  # noqa: F401 - the module's Tansu
from tests.integration.kafka.support import TEST_QUERY

THREADS = 4
EACH = 500


def consume(url: str, topic: str, count: int) -> list[tuple[str | None, bytes]]:
    """``count`` records of ``topic`` (key, value), read from the start by a fresh group."""
    out: list[tuple[str | None, bytes]] = []
    with broker.sync.connect(url) as backend, backend.records(topic, f"g-{uuid.uuid4().hex}") as records:
        while len(out) < count:
            record = records.next_record(timeout=30)
            out.append((record.key, record.value))
        records.commit()
    return out


def publish_from_threads(work: Callable[[int], None], publisher: Any) -> None:
    """``work(n)`` on THREADS threads at once, then every message confirmed (nothing left pending)."""
    threads = [threading.Thread(target=work, args=(n,)) for n in range(THREADS)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
        assert not thread.is_alive(), "a publishing thread hung"
    publisher.flush(timeout=30)
    assert publisher.pending == 0


def test_threads_publish_straight_into_the_producer_and_lose_nothing(kafka_server: ProcessServer) -> None:  # noqa: F811
    url = f"{kafka_server.url}?{TEST_QUERY}"
    topic = f"direct-{uuid.uuid4().hex[:8]}"
    delivered: list[BaseException | None] = []
    lock = threading.Lock()

    def on_delivery(error: BaseException | None, message: OutboundMessage) -> None:
        with lock:
            delivered.append(error)

    with broker.sync.connect(url) as backend:
        publisher = backend.publisher()
        handle = publisher.topic(topic)

        def work(n: int) -> None:
            for i in range(EACH):
                message = OutboundMessage(b"%d:%d" % (n, i), key=f"t{n}")
                handle.publish_nowait(message, on_delivery=on_delivery)

        publish_from_threads(work, publisher)
    assert len(delivered) == THREADS * EACH and not any(delivered)

    got = consume(url, topic, THREADS * EACH)
    per_key: dict[str | None, list[int]] = defaultdict(list)
    for key, value in got:
        n, i = value.split(b":")
        assert key == f"t{int(n)}"
        per_key[key].append(int(i))
    # nothing lost, nothing twice, and each thread's messages (one key) in the order it published
    assert {k: v for k, v in per_key.items()} == {f"t{n}": list(range(EACH)) for n in range(THREADS)}


def test_batches_in_flight_together_keep_each_threads_order(kafka_server: ProcessServer) -> None:  # noqa: F811
    """Small batches from 4 threads, several in flight at once, through a producer queue that fills
    up: each thread's messages (one key) reach the broker in the order it published them."""
    url = f"{kafka_server.url}?{TEST_QUERY}&max_buffered_records=150"
    topic = f"overlap-{uuid.uuid4().hex[:8]}"
    with broker.sync.connect(url) as backend:
        publisher = backend.publisher(max_batch=100)
        handle = publisher.topic(topic)

        def work(n: int) -> None:
            for i in range(EACH):
                handle.publish_nowait(OutboundMessage(b"%d:%d" % (n, i), key=f"t{n}"))

        publish_from_threads(work, publisher)
    per_key: dict[str | None, list[int]] = defaultdict(list)
    for key, value in consume(url, topic, THREADS * EACH):
        per_key[key].append(int(value.split(b":")[1]))
    assert {k: v for k, v in per_key.items()} == {f"t{n}": list(range(EACH)) for n in range(THREADS)}


def test_a_full_producer_queue_is_waited_out(kafka_server: ProcessServer) -> None:  # noqa: F811
    url = f"{kafka_server.url}?{TEST_QUERY}&max_buffered_records=20"
    topic = f"room-{uuid.uuid4().hex[:8]}"
    with broker.sync.connect(url) as backend:
        publisher = backend.publisher()
        handle = publisher.topic(topic)
        for i in range(600):
            handle.publish_nowait(OutboundMessage(b"%d" % i))
        handle.batch_publish(*(OutboundMessage(b"b%d" % i) for i in range(100)), timeout=30)
        publisher.flush(timeout=30)
    values = [value for _, value in consume(url, topic, 700)]
    assert sorted(values) == sorted([b"%d" % i for i in range(600)] + [b"b%d" % i for i in range(100)])


def test_a_queue_that_stays_full_is_a_timeout_within_the_call() -> None:
    """The broker is down: librdkafka keeps the records queued; the next publish gives up in time."""
    url = f"kafka://127.0.0.1:{free_port()}?max_buffered_records=5&close_timeout=1"
    with broker.sync.connect(url, timeout=5, close_timeout=10) as backend:
        publisher = backend.publisher(max_pending=5)
        handle = publisher.topic("nowhere")
        for i in range(5):
            handle.publish_nowait(OutboundMessage(b"%d" % i))
        started = time.monotonic()
        with pytest.raises(Timeout, match="queue stayed full"):
            handle.publish_nowait(OutboundMessage(b"one too many"), timeout=0.3)
        assert 0.25 <= time.monotonic() - started < 3
        assert publisher.pending == 5  # the refused one was not counted in
        started = time.monotonic()
        publisher.close(timeout=0.5)  # the five never arrive: counted in a log line, no hang
        assert time.monotonic() - started < 3


def _child_publishes_and_returns(url: str, topic: str) -> None:  # pragma: no cover - in the child
    backend = broker.sync.connect(url)
    handle = backend.publisher().topic(topic)
    for i in range(100):
        handle.publish_nowait(OutboundMessage(b"%d" % i))
    # returns at once: multiprocessing then ends the child with os._exit, skipping atexit


def test_a_multiprocessing_child_flushes_its_pending_publishes_before_it_ends(
    kafka_server: ProcessServer,  # noqa: F811
) -> None:
    url = f"{kafka_server.url}?{TEST_QUERY}"
    topic = f"mp-{uuid.uuid4().hex[:8]}"
    context = multiprocessing.get_context("fork")
    child = context.Process(target=_child_publishes_and_returns, args=(url, topic))
    child.start()
    child.join(60)
    if child.is_alive():
        child.kill()
        pytest.fail("the child hung at exit")
    assert child.exitcode == 0
    values = sorted(value for _, value in consume(url, topic, 100))
    assert values == sorted(b"%d" % i for i in range(100))
