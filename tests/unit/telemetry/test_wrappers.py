"""The consumers of an instrumented backend have exactly the abilities of what they wrap: the pulls or
receives of its style (callers such as ``broker.adapt`` choose by ``hasattr``), entering, ``stop()``,
and every message still handed out and counted."""

from __future__ import annotations

import asyncio

import broker
from broker import OutboundMessage, adapt
from broker.telemetry import InstrumentedBackend
from broker.telemetry.wrappers import TracedReceiver
from tests.unit.telemetry.conftest import Otel

_ABILITIES = ("next_message", "next_record", "next_batch", "receive", "receive_batch", "stop", "stopped")


def _abilities(consumer: object) -> set[str]:
    return {name for name in _ABILITIES if hasattr(consumer, name)}


async def test_each_consumer_has_the_abilities_of_what_it_wraps(backend: InstrumentedBackend) -> None:
    plain = backend.wrapped
    pairs = {
        "messages": (backend.messages("t", "s"), plain.messages("t", "s")),
        "batched_messages": (backend.batched_messages("t", "s"), plain.batched_messages("t", "s")),
        "records": (backend.records("log", "g"), plain.records("log", "g")),
        "receiver": (backend.receiver("t", "s"), plain.receiver("t", "s")),
    }
    for kind, (traced, wrapped) in pairs.items():
        assert _abilities(traced) == _abilities(wrapped), kind
    # a batched receiver's wrapper takes batches only, even around a receiver that takes messages
    consumer = backend.telemetry.consumer("t", "s", "batched_receiver")
    batched = TracedReceiver(plain.receiver("t", "s"), consumer, batched=True)
    assert _abilities(batched) == {"stop", "stopped"}
    for traced, wrapped in pairs.values():
        for consumer in (traced, wrapped):
            if hasattr(consumer, "close"):
                await consumer.close()


async def test_a_batched_receiver_hands_every_message_to_its_traced_handler_and_stops(
    backend: InstrumentedBackend, otel: Otel
) -> None:
    got: list[bytes] = []
    consumer = backend.telemetry.consumer("jobs", "workers", "batched_receiver")
    source = backend.wrapped.batched_messages("jobs", "workers", batch_size=4, batch_timeout=0.05)
    async with source:  # entering makes the subscription exist
        receiver = TracedReceiver(adapt.batched_receiver(source, 1), consumer, batched=True)
        sent = [OutboundMessage(b"%d" % i) for i in range(10)]
        await backend.publisher().topic("jobs").batch_publish(*sent)

        async def handle(batch: list[broker.Message]) -> None:
            got.extend(m.data for m in batch)
            await broker.ack_all(batch)

        task = asyncio.create_task(receiver.receive_batch(handle))
        async with asyncio.timeout(10):
            while len(got) < 10:  # noqa: ASYNC110 - waits for the handler
                await asyncio.sleep(0.005)
        receiver.stop(5)
        await asyncio.wait_for(task, 10)
    assert sorted(got) == sorted(b"%d" % i for i in range(10))
    assert otel.value("polybroker.messages.acked", destination="jobs", subscription="workers") == 10
    batches = len(otel.named("process jobs"))
    assert batches >= 3
    assert otel.value("polybroker.handler.duration", destination="jobs", outcome="ok") == batches
