"""Kafka: our path against raw confluent-kafka, side by side on one local Tansu broker.

Both sides use the same librdkafka configuration (the backend's own, built from
``KafkaSettings``) and the same records: ``--messages`` (200,000) values of ``--size`` (100) bytes,
each with a key (``k<i % 1000>``) and one header/attribute (``source=bench``).

produce
    raw:  ``Producer.produce(topic, value, key, headers=..., callback=on_delivery)`` per record,
          ``poll(0)`` as the confluent-kafka examples do, ``flush()`` at the end; every delivery
          report counted.
    ours: ``Topic.batch_publish(*chunk)`` for chunks of ``--chunk`` records, all chunks in flight
          at once; each call returns once every report of its chunk is in.
consume + commit (a fresh consumer group reading a topic that holds the records), two pairs:
    commit waited per batch (what confluent-kafka's examples and aiokafka do):
      raw:  ``consume(batch)``, read every key, value and headers, then a synchronous
            ``commit()`` of the batch's end offsets.
      ours-waited: ``batched_records(...).next_batch()``, read every key, value and attributes,
            ``broker.commit_highest_offsets(batch)``, then ``commit()``, which waits for the broker.
    commits not waited per batch (the fastest competent use of each; the last commit waited):
      raw-async: as raw, with ``commit(asynchronous=True)``; one synchronous commit at the end.
      ours: the documented idiom: ``broker.commit_highest_offsets(batch)`` per batch (an ack
            queues its commit: merged, sent asynchronously within ``COMMIT_INTERVAL``), one
            ``commit()`` at the end (waits for the broker).
    Both pairs keep the same guarantee (at-least-once; nothing committed past a record not
    handled). The clock starts at the first non-empty batch (the group join is not timed) and
    stops when the last commit is confirmed.

Peer columns (``bench/peer_kafka.py`` in the peers' virtualenv, made on first use by
``bench/peers.py``; ``--no-peers`` skips them): aiokafka ``create_batch`` + ``send_batch`` with the
same acks, idempotence, compression and linger; aiokafka ``getmany`` + ``commit()`` per batch;
FastStream's batch subscriber committing each batch (``AckPolicy.ACK``), and its per-message
subscriber with defaults (auto-commit: at most once, for information; timed over the first
20,000 records, it runs at a few thousand a second). Peers read the raw side's
topic, each in a fresh group.

Each phase runs ``--rounds`` (5) times, alternating which side goes first; a side's figure is its
best round (the development machines are shared, so the best round is the least disturbed one),
and the ratio of the medians is printed beside. The ratios are printed last; the targets: produce
at least 1.0 of raw and 0.8 of aiokafka, consume + commit at least 0.95 of raw (each pair).
Peers commit every batch and wait, so their ratios are against ours-waited.

Our side runs the Kafka hot path the package installed (``broker --version`` names it). When that
is the compiled one, the whole run is repeated once in a child process with
``POLYBROKER_NO_EXTENSIONS=1`` (the pure-Python fallback) and both sets of ratios are printed side
by side; ``--no-fallback`` skips that second run.

Usage: python bench/kafka.py [--messages N] [--size B] [--batch N] [--rounds N] [--no-peers]
                             [--no-fallback] [--url kafka://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from typing import Any

from peers import peer_python, run_peer

import broker
from broker import OutboundMessage
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.mapping import FASTPATH_VARIANT
from broker.backends.kafka.rdkafka_config import consumer_config, producer_config
from broker.backends.kafka.registration import factory
from broker.backends.kafka.settings import KafkaSettings

# Group joins on Tansu take about session.timeout/2: keep them short for both sides.
CONSUMER_QUERY = "session_timeout=2&heartbeat_interval=0.3"
RAW_HEADERS = [("source", b"bench")]
ATTRIBUTES = {"source": "bench"}


def keys(count: int) -> list[str]:
    return [f"k{i % 1000}" for i in range(count)]


def raw_produce(settings: KafkaSettings, topic: str, payloads: list[bytes], *, reports: bool = True) -> float:
    from confluent_kafka import Producer

    producer = Producer(producer_config(settings))
    producer.produce(topic, b"warm-up")
    producer.flush()
    delivered = 0
    failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered, failed
        if err is not None:
            failed += 1
        delivered += 1

    produce = producer.produce
    poll = producer.poll
    headers = RAW_HEADERS
    records = list(zip(keys(len(payloads)), payloads, strict=True))
    start = time.perf_counter()
    if reports:
        for key, payload in records:
            while True:
                try:
                    produce(topic, payload, key, headers=headers, callback=on_delivery)
                    break
                except BufferError:
                    poll(0.001)
            poll(0)
    else:  # fire and forget: no delivery report reaches Python (context only, not a ratio)
        for key, payload in records:
            while True:
                try:
                    produce(topic, payload, key, headers=headers)
                    break
                except BufferError:
                    poll(0.001)
    producer.flush()
    elapsed = time.perf_counter() - start
    assert not reports or (delivered == len(payloads) and failed == 0), (delivered, failed)
    return len(payloads) / elapsed


async def ours_produce(backend: KafkaBackend, topic: str, payloads: list[bytes], chunk: int) -> float:
    messages = [
        OutboundMessage(p, key=k, attributes=ATTRIBUTES)
        for k, p in zip(keys(len(payloads)), payloads, strict=True)
    ]
    async with backend.publisher() as publisher:
        handle = publisher.topic(topic)
        await handle.publish(OutboundMessage(b"warm-up"))
        start = time.perf_counter()
        await asyncio.gather(
            *(handle.batch_publish(*messages[i : i + chunk]) for i in range(0, len(messages), chunk))
        )
        elapsed = time.perf_counter() - start
    return len(messages) / elapsed


def raw_consume(settings: KafkaSettings, topic: str, count: int, batch: int, *, wait: bool = True) -> float:
    from confluent_kafka import Consumer, TopicPartition

    options = settings.consumer_options(batch_size=batch)
    consumer = Consumer(consumer_config(settings, options, f"raw-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    received = 0
    start = None
    ends: dict[tuple[str, int], int] = {}
    try:
        while received < count:
            messages = consumer.consume(batch, 1.0)
            if not messages:
                continue
            if start is None:
                start = time.perf_counter()
            ends = {}
            for message in messages:
                if message.error() is not None:
                    continue
                message.key(), message.value(), message.headers()
                ends[(message.topic(), message.partition())] = message.offset() + 1  # type: ignore[index,operator]
                received += 1
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=not wait
            )
        if not wait:  # the last commit confirmed, as ours
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False
            )
        assert start is not None
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()


async def ours_consume(
    backend: KafkaBackend, topic: str, count: int, batch: int, *, wait: bool = False
) -> float:
    received = 0
    start = None
    async with backend.batched_records(topic, f"ours-{uuid.uuid4().hex}", batch_size=batch) as batches:
        while received < count:
            records = await batches.next_batch()
            if not records:
                continue
            if start is None:
                start = time.perf_counter()
            for record in records:
                record.key, record.value, record.attributes  # noqa: B018 - as the raw side reads them
            received += len(records)
            await broker.commit_highest_offsets(records)  # queues the commit (an ack does not wait)
            if wait:
                await batches.commit()  # waits for the broker, as the raw side's synchronous commit
        await batches.commit()  # the last commit confirmed
    assert start is not None
    return count / (time.perf_counter() - start)


def best(rates: list[float]) -> float:
    return max(rates)


def line(name: str, base: list[float], ours: list[float], base_name: str = "raw") -> float:
    ratio = best(ours) / best(base)
    median_ratio = statistics.median(ours) / statistics.median(base)
    print(
        f"{name:<34} best {base_name} {best(base):>9,.0f} msg/s, best ours {best(ours):>9,.0f} msg/s, "
        f"ratio {ratio:.3f} (median ratio {median_ratio:.3f})"
    )
    return ratio


def rotated(sides: list[str], round_: int) -> list[str]:
    """``sides`` starting at a different one each round, so no side always goes first."""
    shift = round_ % len(sides)
    return sides[shift:] + sides[:shift]


async def run(url: str, args: argparse.Namespace) -> dict[str, float]:
    backend = broker.connect(f"{url}?{CONSUMER_QUERY}")
    assert isinstance(backend, KafkaBackend)
    settings = backend.settings
    payloads = [
        uuid.uuid4().bytes * (args.size // 16) + b"x" * (args.size % 16) for _ in range(args.messages)
    ]
    peers = None if args.no_peers else peer_python()
    produce_sides = ["raw", "ours"] + (["aiokafka"] if peers else [])
    consume_sides = ["raw", "ours-waited", "raw-async", "ours"] + (
        ["aiokafka", "faststream-batch", "faststream-default"] if peers else []
    )
    produced: dict[str, list[float]] = {side: [] for side in produce_sides}
    consumed: dict[str, list[float]] = {side: [] for side in consume_sides}
    unchecked: list[float] = []
    shape = ["--bootstrap", settings.servers, "--messages", str(args.messages), "--size", str(args.size)]
    async with backend:
        admin = backend.admin
        for round_ in range(args.rounds):
            topics = {side: f"bench-{side}-{uuid.uuid4().hex}" for side in produce_sides}
            for name in topics.values():
                await admin.create_topic(name, args.partitions)
            for side in rotated(produce_sides, round_):
                if side == "raw":
                    rate = raw_produce(settings, topics[side], payloads)
                elif side == "ours":
                    rate = await ours_produce(backend, topics[side], payloads, args.chunk)
                else:
                    assert peers is not None
                    result = run_peer(
                        peers, "peer_kafka.py", "aiokafka-produce", "--topic", topics[side], *shape
                    )
                    rate = result["rate"]
                    if not result.get("idempotence", True) and round_ == 0:
                        print(
                            "note: aiokafka runs without idempotence (this broker refuses its "
                            "InitProducerId); ours stays idempotent, so its ratio to aiokafka is conservative"
                        )
                produced[side].append(rate)
            unchecked.append(raw_produce(settings, f"bench-ff-{uuid.uuid4().hex}", payloads, reports=False))
            # raw's and ours' topics hold the same records; each side reads with a fresh group.
            for side in rotated(consume_sides, round_):
                if side in ("raw", "raw-async"):
                    rate = raw_consume(settings, topics["raw"], args.messages, args.batch, wait=side == "raw")
                elif side in ("ours", "ours-waited"):
                    wait = side == "ours-waited"
                    rate = await ours_consume(backend, topics["ours"], args.messages, args.batch, wait=wait)
                else:
                    assert peers is not None
                    # FastStream's per-message path runs at a few thousand msg/s: its rate over the
                    # first 20,000 records is the same figure in a fraction of the time (last wins)
                    short = ["--messages", str(min(args.messages, 20_000))]
                    rate = run_peer(
                        peers,
                        "peer_kafka.py",
                        "aiokafka-consume" if side == "aiokafka" else side,
                        "--topic",
                        topics["raw"],
                        "--batch",
                        str(args.batch),
                        *shape,
                        *(short if side == "faststream-default" else []),
                    )["rate"]
                consumed[side].append(rate)
            print(
                f"round {round_ + 1}: produce "
                + ", ".join(f"{side} {rates[-1]:,.0f}" for side, rates in produced.items())
                + "; consume+commit "
                + ", ".join(f"{side} {rates[-1]:,.0f}" for side, rates in consumed.items())
                + " msg/s",
                flush=True,
            )
    print()
    print(
        f"(context: raw fire-and-forget produce, no delivery reports in Python: best "
        f"{best(unchecked):,.0f} msg/s; ours/that = {best(produced['ours']) / best(unchecked):.3f})"
    )
    ratios = {"produce ours/raw": line("produce", produced["raw"], produced["ours"])}
    if "aiokafka" in produced:
        ratios["produce ours/aiokafka"] = line(
            "produce vs aiokafka send_batch", produced["aiokafka"], produced["ours"], "aiokafka"
        )
    ratios["consume+commit waited ours/raw"] = line(
        "consume + commit waited per batch", consumed["raw"], consumed["ours-waited"]
    )
    ratios["consume+commit ours/raw-async"] = line(
        "consume + commit not waited", consumed["raw-async"], consumed["ours"], "raw-async"
    )
    ratios["consume+commit ours/raw (information)"] = line(
        "ours (idiom) vs raw (waited)", consumed["raw"], consumed["ours"]
    )
    for side in consume_sides[4:]:
        ratios[f"consume+commit waited ours/{side}"] = line(
            f"consume + commit vs {side}", consumed[side], consumed["ours-waited"], side
        )
    return ratios


TARGETS = {
    "produce ours/raw": 1.0,
    "produce ours/aiokafka": 0.8,
    "consume+commit waited ours/raw": 0.95,
    "consume+commit ours/raw-async": 0.95,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch", type=int, default=1000, help="records per consumed batch and commit")
    parser.add_argument("--chunk", type=int, default=10_000, help="records per batch_publish call")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip the aiokafka and FastStream columns")
    parser.add_argument("--url", default=None, help="an existing broker (default: start a local Tansu)")
    parser.add_argument(
        "--no-fallback", action="store_true", help="do not repeat the run on the pure-Python hot path"
    )
    parser.add_argument("--ratios-to", default=None, help=argparse.SUPPRESS)  # the child run's output
    args = parser.parse_args()
    print(
        f"{args.messages:,} messages of {args.size} bytes with a key and a header, {args.partitions} "
        f"partition(s), consume batches of {args.batch}, {args.rounds} rounds; Kafka hot path: "
        f"{FASTPATH_VARIANT}"
    )
    if args.url:
        ratios = asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            ratios = asyncio.run(run(server.url, args))
    if args.ratios_to:
        with open(args.ratios_to, "w") as out:
            json.dump(ratios, out)
    fallback = None
    if FASTPATH_VARIANT.startswith("compiled") and not args.no_fallback and not args.ratios_to:
        fallback = fallback_ratios([arg for arg in sys.argv[1:] if arg != "--no-fallback"])
    print()
    if fallback is not None:
        print(f"{'':<44} {'compiled':>8}  {'pure Python':>11}")
    for name, ratio in ratios.items():
        target = TARGETS.get(name)
        verdict = f" (target >= {target:.2f})" if target else " (information)"
        beside = f"  {fallback[name]:>11.3f}" if fallback is not None and name in fallback else ""
        print(f"{name + ':':<44} {ratio:>8.3f}{beside}{verdict}")


def fallback_ratios(argv: list[str]) -> dict[str, float] | None:
    """The same run in a child process on the pure-Python hot path; its ratios (None if it failed)."""
    print("\nthe same run on the pure-Python hot path (POLYBROKER_NO_EXTENSIONS=1):", flush=True)
    with open(os.devnull) as devnull:
        handle, path = tempfile.mkstemp(suffix=".json", prefix="polybroker-bench-")
        os.close(handle)
        env = {**os.environ, "POLYBROKER_NO_EXTENSIONS": "1"}
        code = subprocess.call([sys.executable, __file__, *argv, "--ratios-to", path], env=env, stdin=devnull)
    try:
        with open(path) as result:
            ratios: dict[str, float] = json.load(result)
    except (OSError, ValueError):
        print(f"(the pure-Python run failed: exit code {code})")
        return None
    finally:
        os.unlink(path)
    return ratios


if __name__ == "__main__":
    main()
