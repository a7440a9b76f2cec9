"""The blocking API's conformance subset, run on every backend through the suite's ``harness`` fixture.

Subclass :class:`SyncConformanceSuite` next to a backend's conformance tests and provide the same
``harness`` fixture (:class:`broker.testing.Harness` with a ``url``). The tests are plain ``def``
tests: the blocking API runs outside any event loop, on its own loop thread, and connects to
``harness.url`` itself.
"""

from __future__ import annotations

import multiprocessing
import os
import re
import time
from collections.abc import Mapping
from typing import Any

import pytest

from broker.driver.devserver import free_port
from broker.driver.testing.harness import Harness
from broker.errors import BrokerError, ClosedError
from broker.message import OutboundMessage
from broker.sync.backend import GRPC_BACKENDS, SyncBackend, connect
from broker.sync.consuming import SyncMessages

__all__ = ["SyncConformanceSuite"]

_LOOPBACK = re.compile(r"(127\.0\.0\.1|localhost):\d+")


def _connect(harness: Harness, **options: Any) -> SyncBackend:
    if harness.url is None:
        pytest.skip("the harness names no url for the blocking API to connect with")
    return connect(harness.url, **options)


def _take(consumer: SyncMessages, count: int, patience: float, *, ack: bool = True) -> list[Any]:
    got = []
    for _ in range(count):
        message = consumer.next_message(timeout=patience)
        if ack:
            message.ack()
        got.append(message)
    return got


def _dead(url: str | Mapping[str, Any]) -> str | dict[str, Any] | None:
    """``url`` with every loopback ``host:port`` pointing at a port nothing listens on (None: none)."""
    port = free_port()

    def swap(text: str) -> str:
        return _LOOPBACK.sub(lambda m: f"{m.group(1)}:{port}", text)

    if isinstance(url, str):
        return swap(url) if _LOOPBACK.search(url) else None
    swapped = {k: swap(v) if isinstance(v, str) else v for k, v in url.items()}
    return swapped if swapped != dict(url) else None


def _child_publishes(
    backend: SyncBackend, topic: str, prefix: str, count: int, result: Any
) -> None:  # pragma: no cover - runs in the forked child
    try:
        handle = backend.publisher().topic(topic)
        for i in range(count):
            handle.publish_nowait(OutboundMessage(f"{prefix}-{i}".encode()))
        handle._publisher.flush(timeout=30)
        result.put("ok")
    except BaseException as exc:
        result.put(f"{type(exc).__name__}: {exc}")


def _grpc_fork_support() -> bool:
    return os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "").lower() in ("1", "true")


class SyncConformanceSuite:
    """Publish, consume, ack, nack with redelivery, records with commit, close, errors after
    close, fork, and a broker that is down — through :mod:`broker.sync` on one backend."""

    def test_sync_publish_consume_ack(self, harness: Harness) -> None:
        """Every publish style arrives once with its key and attributes; acked messages are not
        delivered again to the subscription's next consumer."""
        if not harness.capabilities.messages:
            pytest.skip("no per-message consumption")
        topic, sub = harness.name("sync"), harness.name("sub")
        with _connect(harness) as backend:
            with backend.messages(topic, sub) as consumer:
                handle = backend.publisher().topic(topic)
                handle.publish(OutboundMessage(b"one", key="k1", attributes={"a": "1"}))
                handle.batch_publish(OutboundMessage(b"two"), OutboundMessage(b"three", key="k3"))
                delivered: list[BaseException | None] = []
                handle.publish_nowait(OutboundMessage(b"four"), on_delivery=lambda e, m: delivered.append(e))
                handle.publish_future(OutboundMessage(b"five")).result(harness.patience)
                handle._publisher.flush(harness.patience)
                got = {m.data: m for m in _take(consumer, 5, harness.patience)}
                consumer.flush()
            assert set(got) == {b"one", b"two", b"three", b"four", b"five"}
            assert delivered == [None]
            assert got[b"one"].key == "k1" and dict(got[b"one"].attributes) == {"a": "1"}
            assert got[b"three"].key == "k3"
            with backend.messages(topic, sub) as again:
                handle.publish(OutboundMessage(b"marker"))
                assert again.next_message(timeout=harness.patience).data == b"marker"

    def test_sync_nack_redelivers(self, harness: Harness) -> None:
        """A nacked message comes back; acked after that, it is not delivered again."""
        caps = harness.capabilities
        if not caps.messages or not caps.nack_redelivers:
            pytest.skip("no nack redelivery")
        topic, sub = harness.name("sync"), harness.name("sub")
        with _connect(harness) as backend, backend.messages(topic, sub) as consumer:
            backend.publisher().topic(topic).publish(OutboundMessage(b"again"))
            first = consumer.next_message(timeout=harness.patience)
            first.nack()
            with pytest.raises(BrokerError):
                first.ack()  # ack after nack
            second = consumer.next_message(timeout=harness.patience)
            assert second.data == b"again"
            assert second.delivery_attempt is None or second.delivery_attempt >= 2
            second.ack(wait=True)

    def test_sync_records_with_commit(self, harness: Harness) -> None:
        """Records read and committed are not read again by the group's next consumer."""
        if not harness.capabilities.records:
            pytest.skip("no partitioned-log consumption")
        topic, group = harness.name("sync"), harness.name("group")
        with _connect(harness) as backend:
            handle = backend.publisher().topic(topic)
            handle.batch_publish(*(OutboundMessage(b"r%d" % i, key="k") for i in range(3)))
            with backend.records(topic, group) as records:
                got = [records.next_record(timeout=harness.patience) for _ in range(3)]
                assert [r.value for r in got] == [b"r0", b"r1", b"r2"]
                got[-1].commit()
                records.commit(timeout=harness.patience)
            handle.publish(OutboundMessage(b"r3", key="k"))
            with backend.records(topic, group) as again:
                assert again.next_record(timeout=harness.patience).value == b"r3"

    def test_sync_close_and_errors_after_close(self, harness: Harness) -> None:
        """Close is idempotent and ends a ``for`` loop; every call after it raises ClosedError."""
        if not harness.capabilities.messages:
            pytest.skip("no per-message consumption")
        topic, sub = harness.name("sync"), harness.name("sub")
        backend = _connect(harness)
        consumer = backend.messages(topic, sub)
        handle = backend.publisher().topic(topic)
        handle.publish(OutboundMessage(b"x"))
        first = consumer.next_message(timeout=harness.patience)
        first.ack()
        started = time.perf_counter()
        consumer.close()
        assert list(consumer) == []  # a for loop over a closed consumer ends at once
        backend.close()
        backend.close()
        assert time.perf_counter() - started < harness.dead_server_bound
        for call in (
            lambda: handle.publish(OutboundMessage(b"y")),
            lambda: handle.publish_nowait(OutboundMessage(b"y")),
            lambda: consumer.next_message(timeout=0.1),
            lambda: backend.messages(topic, sub),
            lambda: backend.publisher(),
        ):
            with pytest.raises(ClosedError):
                call()

    def test_sync_fork_before_and_after_first_use(self, harness: Harness) -> None:
        """A forked child publishes through a backend made before the fork (used and unused in the
        parent): it gets a fresh loop and connection, and the parent receives every message."""
        if not harness.capabilities.messages:
            pytest.skip("no per-message consumption")
        if harness.backend.name == "inmem":
            pytest.skip("an in-memory broker is per process (tests/unit/test_sync_portal.py forks on it)")
        topic, sub = harness.name("sync"), harness.name("sub")
        context = multiprocessing.get_context("fork")
        with _connect(harness) as unused, _connect(harness) as used:
            with used.messages(topic, sub) as consumer:
                used.publisher().topic(topic).publish(OutboundMessage(b"parent"))
                results = context.Queue()
                children = [
                    context.Process(target=_child_publishes, args=(b, topic, name, 10, results))
                    for b, name in ((unused, "before"), (used, "after"))
                ]
                try:
                    for child in children:
                        child.start()
                    for child in children:
                        child.join(60)
                    hung = [child.pid for child in children if child.is_alive()]
                finally:
                    for child in children:
                        if child.is_alive():  # never leave a hung child behind (it holds our pipes)
                            child.kill()
                            child.join(10)
                assert not hung, f"a forked child hung: {hung}"
                outcomes: list[str] = []
                while not results.empty() or len(outcomes) < sum(c.exitcode == 0 for c in children):
                    outcomes.append(results.get(timeout=10))
                if harness.backend.name in GRPC_BACKENDS and not _grpc_fork_support():
                    # gRPC cannot work in the child: the child gets a typed error naming the setting.
                    # (gRPC's own fork handlers can crash a child before any Python code of ours
                    # runs: docs/blocking.md, "Fork". A crashed child is not a hung one.)
                    assert all(
                        o.startswith("ConfigError") and "GRPC_ENABLE_FORK_SUPPORT" in o for o in outcomes
                    ), outcomes
                    # a child that reported nothing was ended by a signal (gRPC's handler), never
                    # by an error of ours (exit code 1) and never by a hang (checked above)
                    assert all(c.exitcode is not None and c.exitcode <= 0 for c in children), [
                        c.exitcode for c in children
                    ]
                    return
                assert outcomes == ["ok", "ok"]
                got = sorted(m.data for m in _take(consumer, 21, harness.patience))
            expected = sorted(
                [b"parent"] + [f"{p}-{i}".encode() for p in ("before", "after") for i in range(10)]
            )
            assert got == expected
            used.publisher().topic(topic).publish(OutboundMessage(b"parent-still-works"))

    def test_sync_broker_down_is_a_typed_error_in_time(self, harness: Harness) -> None:
        """Against an address nothing listens on, connect-and-publish raises a typed error within
        the call's timeout (plus scheduling slack), never hangs."""
        if harness.url is None or (dead := _dead(harness.url)) is None:
            pytest.skip("the harness's url names no loopback address to point elsewhere")
        timeout = 1.0
        started = time.perf_counter()
        with pytest.raises(BrokerError):
            backend = connect(dead, timeout=timeout, close_timeout=timeout)
            try:
                backend.publisher().topic(harness.name("down")).publish(OutboundMessage(b"x"))
            finally:
                backend.close()
        # connect, publish and close each have the timeout; slack for a loaded machine
        assert time.perf_counter() - started < 3 * timeout + 10
