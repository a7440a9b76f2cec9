"""The development server (pulsar-lite) and what survives a broker restart."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest

import broker
from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.devserver import CONFIG_NAME, pulsar_lite
from broker.backends.pulsar.registration import factory
from broker.driver.testing.harness import collect_records
from broker.testing import collect, drain
from tests.integration.pulsar.server import PulsarTestServer

Name = Callable[..., str]


def _listening(pid: int) -> set[tuple[str, int]]:
    """The (address, port) pairs process ``pid`` listens on (IPv4 and IPv6, from /proc)."""
    inodes = set()
    for fd in Path(f"/proc/{pid}/fd").iterdir():
        try:
            target = os.readlink(fd)
        except OSError:
            continue
        if target.startswith("socket:["):
            inodes.add(target[8:-1])
    found = set()
    for table in ("tcp", "tcp6"):
        lines = Path(f"/proc/net/{table}").read_text().splitlines()[1:]
        for line in lines:
            fields = line.split()
            local, state, inode = fields[1], fields[3], fields[9]
            if state == "0A" and inode in inodes:  # LISTEN
                address, port = local.rsplit(":", 1)
                found.add((address, int(port, 16)))
    return found


def test_dev_server_listens_on_loopback_only(pulsar: PulsarTestServer) -> None:
    if pulsar.process is None or pulsar.process.process is None:
        pytest.skip("the tests run against an external Pulsar")
    listening = _listening(pulsar.process.process.pid)
    assert listening == {("0100007F", pulsar.process.port)}, listening  # 127.0.0.1 only: no metrics
    config = (pulsar.process.workdir / CONFIG_NAME).read_text()
    assert "[metrics]\nenabled = false" in config


def test_factory_dev_server_is_returned_unstarted() -> None:
    server = factory.dev_server()
    try:
        assert not server.running
        assert server.url == f"pulsar://127.0.0.1:{server.port}"
    finally:
        server.stop()


async def test_messages_survive_a_broker_restart(
    pulsar: PulsarTestServer, tmp_path: Path, name: Name
) -> None:
    if not pulsar.lite:
        pytest.skip("needs a local pulsar-lite it can restart")
    server = pulsar_lite(workdir=str(tmp_path / "broker"))
    topic, sub = name("topic"), name("sub")
    with server:
        async with broker.connect(server.url) as backend:
            assert isinstance(backend, PulsarBackend)
            await backend.create_subscription(topic, sub)
            await (
                backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(20)))
            )
            async with backend.messages(topic, sub) as consumer:
                acked = await collect(consumer, 5, 10)
    server.stop()
    with server:
        async with broker.connect(server.url) as backend:
            assert isinstance(backend, PulsarBackend)
            async with backend.messages(topic, sub) as consumer:
                rest = await collect(consumer, 15, 15)
                rest += await drain(consumer, 0.5)
            async with backend.reader(topic) as reader:
                everything = await collect_records(reader, 20, 10)
    assert sorted(int(m.data) for m in acked + rest) == list(range(20))
    assert sorted(int(r.value or b"") for r in everything) == list(range(20))


async def test_partitioned_topics(pulsar: PulsarTestServer, name: Name) -> None:
    """Keys route to partitions; a shared subscription and a group read every partition once."""
    if not pulsar.lite:
        pytest.skip("needs a local pulsar-lite started with partitioned topics")
    with pulsar_lite(partitions=3) as server:
        async with broker.connect(f"{server.url}?nack_redelivery_delay=0.2") as backend:
            assert isinstance(backend, PulsarBackend)
            topic, sub, group = name("topic"), name("sub"), name("group")
            await backend.create_subscription(topic, sub)
            await backend.create_subscription(topic, group, subscription_type="failover")
            sent = [OutboundMessage(f"{k}:{i}".encode(), key=f"key-{k}") for i in range(10) for k in range(6)]
            await backend.publisher().topic(topic).batch_publish(*sent)
            async with backend.messages(topic, sub) as consumer:
                got = await collect(consumer, len(sent), 10)
                got += await drain(consumer, 0.5)
            async with backend.records(topic, group) as records:
                logged = await collect_records(records, len(sent), 10)
    assert sorted(m.data for m in got) == sorted(m.data for m in sent)
    assert {r.topic for r in logged} == {topic}
    partitions: dict[str | None, set[int]] = {}
    for record in logged:
        partitions.setdefault(record.key, set()).add(record.partition)
    assert all(len(p) == 1 for p in partitions.values()), "a key was spread over partitions"
    assert {p for ps in partitions.values() for p in ps} <= {0, 1, 2}
    for key in partitions:  # one partition keeps its keys in order
        values = [int((r.value or b"").split(b":")[1]) for r in logged if r.key == key]
        assert values == list(range(10))
