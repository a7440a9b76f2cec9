"""Kafka peer sides for ``bench/kafka.py``: aiokafka and FastStream, run by the peers' Python.

Not run by hand: ``bench/kafka.py`` starts it (through ``bench/peers.py``) as
``python bench/peer_kafka.py SIDE --bootstrap HOST:PORT --topic T --messages N ...``; it times its
own loop and prints one JSON line ``{"rate": msg/s, ...}``. The records are shaped as in
``bench/kafka.py``: a ``--size``-byte value, a key ``k<i % 1000>`` and one header ``source=bench``.

SIDE is one of
    aiokafka-produce    ``create_batch`` + ``send_batch`` (the fastest aiokafka path), all batches
                        in flight, then every batch's future awaited; acks=all, idempotence on,
                        snappy, linger 10 ms, batches of up to 1,000,000 bytes (librdkafka's
                        message.max.bytes caps its batches there too).
    aiokafka-consume    ``getmany(max_records=batch)``, read key, value and headers, then
                        ``await commit()`` after every batch (auto-commit off).
    faststream-batch    a FastStream batch subscriber (``batch=True, max_records=batch``) with
                        ``AckPolicy.ACK``: the batch is committed after the handler, as ours.
    faststream-default  a FastStream per-message subscriber with its defaults (``AckPolicy.ACK_FIRST``:
                        aiokafka's auto-commit every 5 s, so at most once): what a new user writes.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

HEADERS = [("source", b"bench")]


def payloads(count: int, size: int) -> list[bytes]:
    return [uuid.uuid4().bytes * (size // 16) + b"x" * (size % 16) for _ in range(count)]


async def aiokafka_produce(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaProducer  # type: ignore[import-not-found, unused-ignore]

    values = payloads(args.messages, args.size)
    keys = [b"k%d" % (i % 1000) for i in range(args.messages)]
    from aiokafka.errors import UnknownError  # type: ignore[import-not-found, unused-ignore]

    def make(idempotence: bool) -> Any:
        return AIOKafkaProducer(
            bootstrap_servers=args.bootstrap,
            acks="all",
            enable_idempotence=idempotence,
            compression_type="snappy",
            linger_ms=10,
            max_batch_size=1_000_000,
        )

    # Tansu answers aiokafka's InitProducerId with UNKNOWN_SERVER_ERROR (librdkafka's works), so an
    # idempotent aiokafka producer cannot start there: it then runs without idempotence, less work
    # than our idempotent side does, and the result says so.
    idempotence = True
    producer = make(True)
    try:
        await producer.start()
    except UnknownError:
        await producer.stop()
        idempotence = False
        producer = make(False)
        await producer.start()
    try:
        await (await producer.send(args.topic, b"warm-up"))
        partitions = sorted(await producer.partitions_for(args.topic))
        futures = []
        turn = 0
        start = time.perf_counter()
        batch = producer.create_batch()
        for key, value in zip(keys, values, strict=True):
            if batch.append(key=key, value=value, timestamp=None, headers=HEADERS) is None:
                futures.append(await producer.send_batch(batch, args.topic, partition=partitions[turn]))
                turn = (turn + 1) % len(partitions)
                batch = producer.create_batch()
                batch.append(key=key, value=value, timestamp=None, headers=HEADERS)
        if batch.record_count():
            futures.append(await producer.send_batch(batch, args.topic, partition=partitions[turn]))
        await asyncio.gather(*futures)
        elapsed = time.perf_counter() - start
    finally:
        await producer.stop()
    return {"rate": args.messages / elapsed, "idempotence": idempotence}


async def aiokafka_consume(args: argparse.Namespace) -> dict[str, Any]:
    from aiokafka import AIOKafkaConsumer

    consumer = AIOKafkaConsumer(
        args.topic,
        bootstrap_servers=args.bootstrap,
        group_id=args.group,
        auto_offset_reset="earliest",
        enable_auto_commit=False,
        session_timeout_ms=6000,
        heartbeat_interval_ms=300,
        max_poll_records=args.batch,
    )
    await consumer.start()
    received = 0
    start = None
    try:
        while received < args.messages:
            batches = await consumer.getmany(timeout_ms=1000, max_records=args.batch)
            if not batches:
                continue
            if start is None:
                start = time.perf_counter()
            for records in batches.values():
                for record in records:
                    record.key, record.value, record.headers  # noqa: B018 - read as the other sides do
                received += len(records)
            await consumer.commit()
        assert start is not None
        elapsed = time.perf_counter() - start
    finally:
        await consumer.stop()
    return {"rate": args.messages / elapsed}


async def faststream_consume(args: argparse.Namespace, *, batch: bool) -> dict[str, Any]:
    from faststream import AckPolicy  # type: ignore[import-not-found, unused-ignore]
    from faststream.kafka import KafkaBroker, KafkaMessage  # type: ignore[import-not-found, unused-ignore]

    app_broker = KafkaBroker(args.bootstrap, logger=None)
    done = asyncio.Event()
    marks: dict[str, float] = {}
    seen = [0]

    def count(n: int) -> None:
        if not seen[0]:
            marks["first"] = time.perf_counter()
        seen[0] += n
        if seen[0] >= args.messages:
            marks["last"] = time.perf_counter()
            done.set()

    if batch:

        @app_broker.subscriber(
            args.topic,
            group_id=args.group,
            auto_offset_reset="earliest",
            batch=True,
            max_records=args.batch,
            ack_policy=AckPolicy.ACK,
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
        )
        async def handle_batch(bodies: list[bytes], message: KafkaMessage) -> None:
            for raw in message.raw_message:
                raw.key, raw.value, raw.headers  # noqa: B018
            count(len(bodies))

    else:

        @app_broker.subscriber(
            args.topic,
            group_id=args.group,
            auto_offset_reset="earliest",
            session_timeout_ms=6000,
            heartbeat_interval_ms=300,
        )
        async def handle(body: bytes, message: KafkaMessage) -> None:
            message.raw_message.key, message.headers  # noqa: B018
            count(1)

    async with app_broker:
        await app_broker.start()
        await asyncio.wait_for(done.wait(), timeout=600)
    # the first message is not timed (the clock starts when it arrives, as on the other sides)
    return {"rate": (args.messages - 1) / (marks["last"] - marks["first"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "side", choices=["aiokafka-produce", "aiokafka-consume", "faststream-batch", "faststream-default"]
    )
    parser.add_argument("--bootstrap", required=True)
    parser.add_argument("--topic", required=True)
    parser.add_argument("--group", default=f"peer-{uuid.uuid4().hex}")
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--batch", type=int, default=1000)
    args = parser.parse_args()
    if args.side == "aiokafka-produce":
        result = asyncio.run(aiokafka_produce(args))
    elif args.side == "aiokafka-consume":
        result = asyncio.run(aiokafka_consume(args))
    else:
        result = asyncio.run(faststream_consume(args, batch=args.side == "faststream-batch"))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
