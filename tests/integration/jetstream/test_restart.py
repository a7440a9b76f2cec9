"""Surviving a server restart (file storage keeps the messages), and shutting down without hanging."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.registration import factory
from broker.driver.devserver import free_port
from broker.driver.testing.harness import collect
from broker.errors import ConnectionFailed
from tests.integration.jetstream.helpers import unique


@pytest.mark.slow
async def test_messages_and_consumers_survive_a_server_restart(tmp_path: Path) -> None:
    port = free_port()
    store = str(tmp_path / "nats")
    server = factory.dev_server(port=port, store_dir=store)
    await asyncio.to_thread(server.start)
    restarted = None
    try:
        backend = broker.connect(f"{server.url}?reconnect_wait=0.1&publish_timeout=20")
        assert isinstance(backend, JetStreamBackend)
        async with backend:
            topic, idle_topic = unique("restart"), unique("idle")
            publisher = backend.publisher()
            count = 100
            await publisher.topic(topic).batch_publish(
                *(OutboundMessage(b"%d" % i, attributes={"Nats-Msg-Id": f"m{i}"}) for i in range(count))
            )
            await publisher.topic(idle_topic).publish(OutboundMessage(b"before"))
            async with (
                backend.messages(topic, "worker", ack_wait=2) as consumer,
                backend.messages(idle_topic, "idle") as idle,
            ):
                before = await collect(consumer, 40, 5)
                (first_idle,) = await collect(idle, 1, 5)
                await backend.connection.flush(5)  # the acks reached the server
                # This consumer is waiting while the server goes away and comes back.
                waiting = asyncio.ensure_future(idle.next_message())
                await asyncio.sleep(0.2)

                await asyncio.to_thread(server.stop)
                assert not server.running
                restarted = factory.dev_server(port=port, store_dir=store)
                await asyncio.to_thread(restarted.start)

                # What was stored before the restart is still there, and acked messages stay acked.
                after = await collect(consumer, count - 40, 30)
                # Publishing works again and wakes the consumer that waited through the restart.
                await publisher.topic(idle_topic).publish(
                    OutboundMessage(b"after", attributes={"Nats-Msg-Id": "after"})
                )
                async with asyncio.timeout(30):
                    woken = await waiting
                await woken.ack()
        assert (first_idle.data, woken.data) == (b"before", b"after")
        values = Counter(int(m.data) for m in before + after)
        assert set(values) == set(range(count)), f"lost: {set(range(count)) - set(values)}"
        assert all(values[int(m.data)] == 1 for m in before), "a message acked before the restart came back"
    finally:
        server.stop()
        if restarted is not None:
            restarted.stop()


async def test_close_does_not_hang_when_the_server_is_gone() -> None:
    with factory.dev_server() as server:
        backend = broker.connect(f"{server.url}?close_timeout=2&reconnect_wait=0.1")
        topic = unique("gone")
        publisher = backend.publisher()
        await publisher.topic(topic).publish(OutboundMessage(b"x"))
        consumer = backend.messages(topic, "worker")
        await collect(consumer, 1, 5, ack=False)
        waiting = asyncio.ensure_future(consumer.next_message())
        await asyncio.sleep(0.1)
        assert server.process is not None
        server.process.kill()
        server.process.wait()
        started = time.monotonic()
        async with asyncio.timeout(10):
            await backend.close()
            with pytest.raises(broker.errors.ClosedError):
                await waiting
        assert time.monotonic() - started < 6
        await backend.close()  # idempotent


async def test_connecting_to_nothing_fails_in_time() -> None:
    port = free_port()
    backend = broker.connect(f"nats://127.0.0.1:{port}?connect_timeout=1")
    started = time.monotonic()
    with pytest.raises(ConnectionFailed, match=str(port)):
        await backend.publisher().topic("t").publish(OutboundMessage(b"x"))
    assert time.monotonic() - started < 3
    await backend.close()
