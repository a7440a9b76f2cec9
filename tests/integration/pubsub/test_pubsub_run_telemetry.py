"""broker.run over an instrumented Pub/Sub batched receiver: the handler gets batches, and drains."""

from __future__ import annotations

import asyncio
import uuid

import broker
from broker import telemetry
from broker.backends.pubsub.backend import PubsubBackend
from broker.driver.devserver import ProcessServer
from broker.message import OutboundMessage

PATIENCE = 15.0


async def test_run_hands_batches_to_an_instrumented_batched_receiver(pubsub_emulator: ProcessServer) -> None:
    backend = broker.connect(pubsub_emulator.url)
    assert isinstance(backend, PubsubBackend)
    instrumented = telemetry.instrument(backend, opentelemetry=False, backlog_interval=None)
    topic, sub = f"run-{uuid.uuid4().hex[:8]}", f"sub-{uuid.uuid4().hex[:8]}"
    await backend.ensure_subscription(topic, sub)
    count = 20
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
    kinds: set[str] = set()
    handled: list[int] = []
    stop = asyncio.Event()

    async def handler(batch: object) -> None:
        kinds.add(type(batch).__name__)
        if not isinstance(batch, list):
            stop.set()  # a batch handler given one message: fail fast
            return
        await broker.ack_all(batch)
        handled.extend(int(m.data) for m in batch)
        if len(set(handled)) == count:
            stop.set()

    receiver = instrumented.batched_receiver(topic, sub, batch_size=5, batch_timeout=0.1)
    async with asyncio.timeout(PATIENCE):
        code = await broker.run((receiver, handler), stop=stop, drain_timeout=5, backends=[backend])
    assert kinds == {"list"}, f"the batch handler was called with {sorted(kinds)}"
    assert code == 0
    assert sorted(set(handled)) == list(range(count)), "lost"
