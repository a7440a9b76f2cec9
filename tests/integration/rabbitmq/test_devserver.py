"""The development server: loopback only, its own directories, and nothing left running after stop."""

from __future__ import annotations

import os
import time
from pathlib import Path

import broker
from broker import OutboundMessage
from broker.backends.rabbitmq import factory
from broker.driver.devserver import free_port
from tests.integration.rabbitmq.server import running_rabbitmq_server


def _tree(root: int) -> set[int]:
    """``root`` and every process below it (from /proc)."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            parents[int(entry.name)] = int(stat.rsplit(")", 1)[1].split()[1])
    found, grew = {root}, True
    while grew:
        more = {pid for pid, parent in parents.items() if parent in found} - found
        found |= more
        grew = bool(more)
    return found


def _alive(pids: set[int]) -> set[int]:
    alive = set()
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.add(pid)
    return alive


def _listening_addresses(port: int) -> set[str]:
    """The local addresses (hex, as in /proc/net/tcp*) with a TCP socket listening on ``port``."""
    found: set[str] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text().splitlines()[1:]:
            fields = line.split()
            address, _, hex_port = fields[1].partition(":")
            if fields[3] == "0A" and int(hex_port, 16) == port:
                found.add(address)
    return found


async def test_a_dev_server_serves_on_loopback_and_stops_completely() -> None:
    port = free_port()
    assert factory.dev_server(port).url == f"rabbitmq://guest:guest@127.0.0.1:{port}/"
    with running_rabbitmq_server() as server:
        base = server._dir
        assert base is not None and base.is_dir()
        assert server._server is not None and server._server.process is not None
        assert server._epmd is not None and server._epmd.process is not None
        processes = _tree(server._server.process.pid) | _tree(server._epmd.process.pid)
        assert len(processes) >= 3, "epmd, beam.smp and its helpers"
        async with broker.connect(server.url) as backend, backend.messages("t", "s") as consumer:
            await backend.publisher().topic("t").publish(OutboundMessage(b"hello"))
            message = await consumer.next_message(timeout=5)
            await message.ack()
        assert _listening_addresses(server.port) == {"0100007F"}, "AMQP listens on 127.0.0.1 only"
    assert not base.exists(), "the temporary directory was removed"
    deadline = time.monotonic() + 5
    while _alive(processes) and time.monotonic() < deadline:
        time.sleep(0.1)  # noqa: ASYNC251 - a plain wait for other processes to go
    left = _alive(processes)
    for pid in left:  # do not leave them to the other tests
        os.kill(pid, 9)
    assert not left, f"processes left after stop: {left}"
