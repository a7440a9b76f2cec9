"""Typed messages: the typed API against the same loop written by hand, on inmem and Kafka.

For a pydantic model and a msgspec Struct (4 fields, ~60 bytes of JSON), ``--messages`` values
(100,000 in memory, 50,000 on Kafka) are published and consumed twice per round, alternating:

typed: ``typed.topic(...).batch_publish(*chunk)`` for chunks of ``--chunk``; in memory
       ``typed.batched_messages(...)`` reading ``message.decoded`` and acking the batch
       (``broker.ack_all``); on Kafka ``typed.batched_records(...)`` reading ``record.decoded`` and
       committing (``broker.commit_highest_offsets``).
hand:  the same loop with the same encoder and decoder objects (the binding's ``encoder`` /
       ``decoder``) and the same calls: ``encoder(value)``, ``OutboundMessage(data, None, ATTRS)``
       with the same ``content-type`` attribute mapping, ``batch_publish``; receive, ``decoder(data)``
       for every message of the batch into a list (``values``), ack or commit. Like the typed
       batch, whose messages keep their decoded values, the list lives until the next batch
       replaces it. (Values dropped the moment they are made never reach an older GC generation;
       with 100,000 pydantic models alive in the process that makes a loop about 1.4x faster,
       whichever API it uses; ``--drop-at-once`` measures the hand loop that way, for information.)

Each path runs ``--rounds`` times (default 5), typed and hand alternating; the ratio is typed
throughput over hand throughput, best and median (target >= 0.95). Kafka runs on a local Tansu
started for the run, with a 2 s session timeout so a round does not time mostly the group join
(``--url`` names an existing broker instead; ``--no-kafka`` skips it).

Usage: python bench/typed.py [--messages N] [--kafka-messages N] [--chunk N] [--rounds N] [--no-kafka]
       [--drop-at-once]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import statistics
import time
import uuid
from collections.abc import Callable, Coroutine
from typing import Any

import msgspec
import pydantic

import broker
from broker import OutboundMessage, typed


class PydanticOrder(pydantic.BaseModel):
    id: int
    item: str
    qty: int
    price: float


class StructOrder(msgspec.Struct):
    id: int
    item: str
    qty: int
    price: float


#: ``--drop-at-once``: the hand loop deletes its decoded values before settling (for information).
DROP_AT_ONCE = False


def values(kind: type[Any], count: int) -> list[Any]:
    if kind is PydanticOrder:
        return [PydanticOrder(id=i, item="book", qty=i % 7, price=9.5) for i in range(count)]
    return [StructOrder(i, "book", i % 7, 9.5) for i in range(count)]


async def inmem_round(kind: type[Any], items: list[Any], chunk: int, use_typed: bool) -> float:
    bound = typed.binding(kind)
    backend = broker.connect(f"inmem://typed-bench-{uuid.uuid4().hex}?batch_size={chunk}")
    async with backend:
        publisher = backend.publisher()
        source = backend.batched_messages("t", "s", batch_size=chunk, batch_timeout=0.5)
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        count = len(items)
        received = 0
        if use_typed:
            handle = typed.topic(publisher, "t", bound)
            consumer = typed.batched_messages(source, bound)

            async def produce() -> None:
                for part in chunks:
                    await handle.batch_publish(*part)
                    await asyncio.sleep(0)

            async def consume() -> None:
                nonlocal received
                while received < count:
                    batch = await consumer.next_batch()
                    for message in batch:
                        message.decoded  # noqa: B018 - decoding is the work measured
                    await broker.ack_all(batch)
                    received += len(batch)

        else:
            topic = publisher.topic("t")
            encode, decode = bound.encoder, bound.decoder
            attrs = {"content-type": bound.content_type}

            async def produce() -> None:
                for part in chunks:
                    await topic.batch_publish(*[OutboundMessage(encode(v), None, attrs) for v in part])
                    await asyncio.sleep(0)

            async def consume() -> None:
                nonlocal received
                while received < count:
                    batch = await source.next_batch()
                    decoded_values = [decode(message.data) for message in batch]
                    if DROP_AT_ONCE:
                        del decoded_values
                    await broker.ack_all(batch)
                    received += len(batch)

        start = time.perf_counter()
        await asyncio.gather(produce(), consume())
        return count / (time.perf_counter() - start)


async def kafka_round(url: str, kind: type[Any], items: list[Any], chunk: int, use_typed: bool) -> float:
    bound = typed.binding(kind)
    backend = broker.connect(url)
    async with backend:
        publisher = backend.publisher()
        name = f"typed-bench-{uuid.uuid4().hex[:8]}"
        chunks = [items[i : i + chunk] for i in range(0, len(items), chunk)]
        count = len(items)
        received = 0
        start = time.perf_counter()
        if use_typed:
            handle = typed.topic(publisher, name, bound)
            await asyncio.gather(*(handle.batch_publish(*part) for part in chunks))
            source = backend.batched_records(name, "g", batch_size=chunk)
            async with typed.batched_records(source, bound) as rs:
                while received < count:
                    batch = await rs.next_batch()
                    for record in batch:
                        record.decoded  # noqa: B018 - decoding is the work measured
                    await broker.commit_highest_offsets(batch)
                    received += len(batch)
        else:
            topic = publisher.topic(name)
            encode, decode = bound.encoder, bound.decoder
            attrs = {"content-type": bound.content_type}
            await asyncio.gather(
                *(topic.batch_publish(*[OutboundMessage(encode(v), None, attrs) for v in p]) for p in chunks)
            )
            async with backend.batched_records(name, "g", batch_size=chunk) as raw:
                while received < count:
                    records = await raw.next_batch()
                    decoded_values = [decode(record.value or b"") for record in records]
                    if DROP_AT_ONCE:
                        del decoded_values
                    await broker.commit_highest_offsets(records)
                    received += len(records)
        return count / (time.perf_counter() - start)


def compare(label: str, rounds: int, run: Callable[[bool], Coroutine[Any, Any, float]]) -> float:
    typed_rates: list[float] = []
    hand_rates: list[float] = []
    ratios: list[float] = []
    for _ in range(rounds):
        hand = asyncio.run(run(False))
        typed_rate = asyncio.run(run(True))
        hand_rates.append(hand)
        typed_rates.append(typed_rate)
        ratios.append(typed_rate / hand)
    best = max(typed_rates) / max(hand_rates)
    median = statistics.median(ratios)
    print(
        f"{label:<28} typed best {max(typed_rates):>10,.0f}/s  hand best {max(hand_rates):>10,.0f}/s  "
        f"ratio best {best:.3f}  median {median:.3f} (target >= 0.95)"
    )
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--kafka-messages", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", default=None, help="an existing Kafka broker (default: start a local Tansu)")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument(
        "--drop-at-once", action="store_true", help="the hand loop drops each batch's values at once"
    )
    args = parser.parse_args()
    global DROP_AT_ONCE
    DROP_AT_ONCE = args.drop_at_once
    for kind in (PydanticOrder, StructOrder):
        items = values(kind, args.messages)
        compare(
            f"inmem {kind.__name__}",
            args.rounds,
            functools.partial(inmem_round, kind, items, args.chunk),
        )
    if args.no_kafka:
        return

    def on_kafka(url: str) -> None:
        for kind in (PydanticOrder, StructOrder):
            items = values(kind, args.kafka_messages)
            compare(
                f"kafka {kind.__name__}",
                args.rounds,
                functools.partial(kafka_round, url, kind, items, args.chunk),
            )

    if args.url:
        on_kafka(args.url)
    else:
        from broker.backends.kafka.registration import factory

        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            # A consumer group join on Tansu takes about half the session timeout (45 s by default):
            # with the default, every round would time mostly the join, the same on both sides.
            on_kafka(f"{server.url}?session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1")


if __name__ == "__main__":
    main()
