"""A peer side of ``bench/app.py``: a FastStream subscriber taking a pydantic model, acked after it.

Runs in the peers' virtualenv (``bench/peers.py``), never in the project's. The topic (Kafka) or
stream (NATS JetStream) is filled before the clock starts with the JSON of ``--messages`` orders;
then a FastStream per-message subscriber whose annotation is the pydantic model consumes them with
``AckPolicy.ACK`` (acked, or committed, after the handler returns: the app's auto-ack). The clock
runs from the first message handed to the handler to the last. Prints one JSON line
``{"rate": msgs_per_second}``.

Usage (by bench/app.py): peer_app.py {kafka,nats} --url URL --messages N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

import pydantic


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int
    price: float


class Count:
    """The first and the last message handed to the handler; done once ``total`` were."""

    def __init__(self, total: int) -> None:
        self.total = total
        self.seen = 0
        self.first = self.last = 0.0
        self.done = asyncio.Event()

    def tick(self) -> None:
        if not self.seen:
            self.first = time.perf_counter()
        self.seen += 1
        if self.seen >= self.total:
            self.last = time.perf_counter()
            self.done.set()

    async def run(self, app: Any) -> dict[str, Any]:
        """Start the FastStream broker ``app``, wait until every message was handled, the rate."""
        async with app:
            await app.start()
            await asyncio.wait_for(self.done.wait(), timeout=600)
            await asyncio.sleep(0.2)  # the last ack goes out after the handler returns
        return {"rate": (self.total - 1) / (self.last - self.first)}


def bodies(count: int) -> list[bytes]:
    return [Order(id=i, item="book", qty=i % 7, price=9.5).model_dump_json().encode() for i in range(count)]


async def kafka(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-not-found, unused-ignore]
    from faststream import AckPolicy  # type: ignore[import-not-found, unused-ignore]
    from faststream.kafka import KafkaBroker  # type: ignore[import-not-found, unused-ignore]

    bootstrap = args.url.removeprefix("kafka://").split("?")[0]
    topic = "peer-app-" + uuid.uuid4().hex[:8]
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, enable_idempotence=False, linger_ms=10)
    await producer.start()
    try:
        for body in bodies(args.messages):
            await producer.send(topic, body)
        await producer.flush()
    finally:
        await producer.stop()
    app = KafkaBroker(bootstrap, logger=None)
    count = Count(args.messages)

    @app.subscriber(
        topic,
        group_id="peer",
        auto_offset_reset="earliest",
        ack_policy=AckPolicy.ACK,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
    )
    async def handle(order: Order) -> None:
        count.tick()

    return await count.run(app)


async def nats(args: argparse.Namespace) -> dict[str, Any]:
    import nats as nats_py  # type: ignore[import-not-found, unused-ignore]
    from faststream import AckPolicy  # type: ignore[import-not-found, unused-ignore]
    from faststream.nats import JStream, NatsBroker, PullSub  # type: ignore[import-not-found, unused-ignore]

    stream = "PEERAPP_" + uuid.uuid4().hex[:8]
    subject = stream.lower()
    nc = await nats_py.connect(args.url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        payloads = bodies(args.messages)
        for start in range(0, len(payloads), 1000):
            futures = [await js.publish_async(subject, body) for body in payloads[start : start + 1000]]
            await asyncio.gather(*futures)
    finally:
        await nc.close()
    app = NatsBroker(args.url, logger=None)
    count = Count(args.messages)

    @app.subscriber(
        subject,
        stream=JStream(stream, declare=False),
        durable="peer",
        pull_sub=PullSub(batch_size=500, timeout=1.0),
        ack_policy=AckPolicy.ACK,
    )
    async def handle(order: Order) -> None:
        count.tick()

    return await count.run(app)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("side", choices=["kafka", "nats"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--messages", type=int, required=True)
    args = parser.parse_args()
    run = kafka if args.side == "kafka" else nats
    print(json.dumps(asyncio.run(run(args))))


if __name__ == "__main__":
    main()
