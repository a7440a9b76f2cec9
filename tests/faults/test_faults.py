"""The fault matrix: every backend x fault where it applies; lost must be 0 and it recovers.

Also the server-control module's own tests (on a real nats-server). Everything that hurts a server is
in this one file, so the root conftest gives it one xdist group: these tests never run in parallel.

``make faults`` runs every cell (``-m faults``); ``make test`` runs the short subset
(:data:`SUBSET`). Cells that cannot apply skip with the reason, which docs/reliability.md repeats.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import pytest

from tests.faults.conftest import RESULTS
from tests.faults.nemesis import CONSUMER_CRASH, FAULTS, run_fault
from tests.faults.servers import BACKENDS, IN_MEMORY, controlled_server

#: ``COUNT@RATE`` of every cell: ``make faults`` sets ``POLYBROKER_FAULTS_SHAPE=3000@300`` (3,000
#: messages at 300/s); the subset inside ``make test`` runs the default, 600 at 150/s.
SHAPE = os.environ.get("POLYBROKER_FAULTS_SHAPE") or "600@150"

#: ``COUNT@RATE`` of a backend whose test server cannot take :data:`SHAPE`: moto, the SQS fake,
#: answers a few dozen calls a second on a shared machine (a thread and a connection per call), so
#: at 150 publishes a second its backlog, not the fault, would decide the cell.
SHAPES = {"sqs": "300@20"}

#: Why the Kafka restart cell may lose records: the broker does, not the library. Reproduced with the
#: raw client in tests/faults/test_broker_restart.py.
TANSU_S3_LOSES_ACKED_RECORDS = (
    "Tansu 0.6 bug: on s3:// storage, with an idempotent producer, records the broker acknowledged around a "
    "SIGKILL are missing from the log after the restart (raw confluent-kafka, acks=all: 3 of 6 runs lost 2 "
    "acked records with idempotence on, 0 of 5 with it off; tests/faults/test_broker_restart.py)"
)

#: The cells ``make test`` runs too: one restart and one pause, on two backends.
SUBSET = {("jetstream", "restart"), ("kafka", "pause")}


def _cells() -> list[object]:
    cells: list[object] = []
    for backend in BACKENDS:
        for fault in (*FAULTS, *(("consumer-crash",) if backend in CONSUMER_CRASH else ())):
            marks = [pytest.mark.faults, pytest.mark.timeout(300)]
            if (backend, fault) not in SUBSET:
                marks.append(pytest.mark.faults_full)
            cells.append(pytest.param(backend, fault, marks=marks, id=f"{backend}-{fault}"))
    return cells


@pytest.mark.parametrize(("backend", "fault"), _cells())
async def test_fault_loses_no_confirmed_message(backend: str, fault: str, tmp_path: Path) -> None:
    """``SHAPE`` messages (600 at 150/s by default) with the fault 1.5 s in: every confirmed id is
    delivered, and it recovers."""
    if fault == "restart" and backend in IN_MEMORY:
        pytest.skip(f"{backend} restart: {IN_MEMORY[backend]}")
    storage = tmp_path / "storage"
    with controlled_server(
        backend, storage, isolated=fault == "network-cut", persistent=fault == "restart"
    ) as server:
        assert server.pids(), "the server has no process tree"
        count, rate = SHAPES.get(backend, SHAPE).split("@")
        result = await run_fault(server, fault, tmp_path, count=int(count), rate=float(rate))
        RESULTS.append(result)
        report = result.report
        if report.lost and (backend, fault) == ("kafka", "restart"):
            absent = _absent_from_the_log(server.connect, result.topic, report.lost)
            if absent == set(report.lost):
                pytest.xfail(
                    f"{TANSU_S3_LOSES_ACKED_RECORDS} (this run: {sorted(absent)} acked, not in the log)"
                )
    print(
        f"\n{backend} {fault} ({result.fault_seconds:.1f}s fault, {result.wall_seconds:.1f}s run): "
        f"{report.summary()}"
        + (
            f"; the killed consumer held {len(result.unacked_by_crash)} unacked"
            if fault == "consumer-crash"
            else ""
        )
    )
    assert report.confirmed > 0, f"nothing was confirmed: {report.summary()}"
    assert not report.lost, report.problems()
    assert report.ok, report.problems()


# The server-control module itself.


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
        return stat.read().rsplit(")", 1)[1].split()[0]


def _states(pids: list[int], want: str, timeout: float = 5.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while True:
        states = [_state(p) for p in pids]
        if all(s == want for s in states) or time.monotonic() > deadline:
            return states
        time.sleep(0.02)


def test_pause_resume_and_restart_on_the_same_port_and_storage(tmp_path: Path) -> None:
    storage = tmp_path / "nats"
    with controlled_server("jetstream", storage) as server:
        port, pids = server.port, server.pids()
        assert pids and server.process.pid in pids
        server.pause()
        assert server.process.paused
        assert _states(pids, "T") == ["T"] * len(pids)
        server.resume()
        assert not server.process.paused
        assert "T" not in _states(pids, "S")
        assert (storage / "jetstream").is_dir(), "JetStream did not store under the storage directory"

        server.restart()
        assert server.port == port
        assert not set(server.pids()) & set(pids), "a process of the killed server survived"
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            pass
        assert (storage / "jetstream").is_dir()

        server.kill()
        assert server.pids() == []
        with pytest.raises(OSError), socket.create_connection(("127.0.0.1", port), timeout=1):
            pass


def test_in_memory_servers_refuse_a_restart(tmp_path: Path) -> None:
    assert set(IN_MEMORY) == {"pubsub", "servicebus", "sqs"}
    with controlled_server("kafka", tmp_path / "kafka") as server:  # Tansu on memory:// unless persistent
        assert server.restart_unsupported is not None
        with pytest.raises(RuntimeError, match="not applicable"):
            server.restart()


def _absent_from_the_log(connect: object, topic: str, ids: tuple[str, ...]) -> set[str]:
    """Which of ``ids`` are not in ``topic`` at all, read with the raw client from the beginning."""
    from confluent_kafka import Consumer, TopicPartition

    bootstrap = str(connect).split("://", 1)[1].split("?", 1)[0]
    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": f"faults-audit-{topic}", "enable.auto.commit": False}
    )
    wanted, seen = set(ids), set()
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        deadline = time.monotonic() + 20
        idle = 0
        while time.monotonic() < deadline and idle < 3 and not wanted <= seen:
            batch = consumer.consume(1000, timeout=1)
            idle = 0 if batch else idle + 1
            seen.update(m.value().decode() for m in batch if m.error() is None and m.value() is not None)
    finally:
        consumer.close()
    return wanted - seen
