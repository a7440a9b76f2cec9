"""Edge cases of the blocking API: re-opening after fork from many threads, close racing the
read-ahead, the loop-side tasks surviving a BaseException, and bad arguments."""

from __future__ import annotations

import multiprocessing
import threading
import uuid
from typing import Any

import pytest

import broker.sync
from broker import OutboundMessage
from broker.errors import ConfigError

THREADS = 8


def _child_races_first_publish(
    publisher: broker.sync.SyncPublisher, results: Any
) -> None:  # pragma: no cover
    try:
        handle = publisher.topic("race")
        start = threading.Barrier(THREADS)
        done: list[str] = []

        def publish(n: int) -> None:
            start.wait()
            try:
                handle.publish_future(OutboundMessage(b"%d" % n)).result(10)
                done.append("ok")
            except BaseException as exc:
                done.append(repr(exc))

        threads = [threading.Thread(target=publish, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(30)
        results.put(sorted(done))
    except BaseException as exc:
        results.put([repr(exc)])


def test_threads_making_the_first_publish_in_a_forked_child_lose_nothing() -> None:
    with broker.sync.connect(f"inmem://review-{uuid.uuid4().hex}") as backend:
        publisher = backend.publisher()
        publisher.topic("race").publish(OutboundMessage(b"parent"))
        context = multiprocessing.get_context("fork")
        results = context.Queue()
        child = context.Process(target=_child_races_first_publish, args=(publisher, results))
        child.start()
        try:
            outcome = results.get(timeout=60)
            child.join(30)
        finally:
            if child.is_alive():
                child.kill()
        assert outcome == ["ok"] * THREADS
        assert child.exitcode == 0


@pytest.mark.parametrize("bad", [None, float("nan"), -1.0])
def test_connect_refuses_a_bad_timeout(bad: Any) -> None:
    with pytest.raises(ConfigError):
        broker.sync.connect("inmem://review-bad", timeout=bad)


@pytest.mark.parametrize("option", ["max_batch", "max_pending"])
def test_publisher_refuses_a_zero_count(option: str) -> None:
    with broker.sync.connect(f"inmem://review-{uuid.uuid4().hex}") as backend, pytest.raises(ConfigError):
        backend.publisher(**{option: 0})
