"""The marker-topic queue against plain Kafka consumption, on one local Tansu broker.

Run it as ``python bench/kafka_queue.py`` (it used to be ``bench/queue.py``, a name that shadowed the
standard library's ``queue`` module for every script in this folder).

Both sides read the same records: ``--messages`` (200,000) values of ``--size`` (100) bytes, in one
topic of ``--partitions`` (1) partition(s), each side with a fresh consumer group or subscription,
and both put every value into a set to check that each arrived exactly once.

plain
    ``batched_records(topic, group, batch_size=B).next_batch()``, then
    ``broker.commit_highest_offsets(batch)`` and ``commit()`` (one synchronous commit per batch).
queue (per-message acknowledgement)
    ``batched_messages(topic, subscription, batch_size=B).next_batch()``, then ``broker.ack_all(batch)``;
    at the end ``flush()`` waits for the last END markers. With ``--markers batched`` (the default)
    the consumer writes one START per fetched batch before its commit and one END per pass of acks;
    with ``--markers per-message`` kafka-mq-go's START and END per message. A redelivery tracker
    (``queue_tracker(topic)``) runs all along in the same process, reading every marker; it joins
    its group before the clock starts (an embedded one would still be joining during a short run).
    How long it needs after the last END to read everything is printed too. ``--queue-option
    NAME=VALUE`` sets a QueueSettings field of the queue side (defaults otherwise).

Both sides use ``linger=0.001`` (kafka-mq-go's marker producer uses ``linger.ms=1``; only the queue
side produces). Throughput: the clock starts at the first non-empty batch (group joins are not
timed) and stops when every message is committed (plain) or acked with its END written (queue).
Latency (queue side): from ``next_batch()`` returning a message to the broker confirming its END
marker, p50 and p95 over every message.

Each side runs ``--rounds`` (5) times, alternating which goes first; a side's figure is its best round
(the machines are shared; the best round is the least disturbed one), and the median ratio is printed
too. kmq, the JVM original, published about 0.82 of plain Kafka (research/peers.md §2.1); the target
here is at least 0.85.

Both sides run the Kafka hot path the package installed (``broker --version`` names it). When that
is the compiled one, the run is repeated once in a child process with ``POLYBROKER_NO_EXTENSIONS=1``
(the pure-Python fallback) and both ratios are printed side by side (``--no-fallback`` skips it).

Usage: python bench/kafka_queue.py [--messages N] [--size B] [--batch N] [--partitions N] [--rounds N]
       [--markers batched|per-message] [--queue-option NAME=VALUE] [--url kafka://...] [--profile FILE]
       [--no-fallback]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable
from typing import Any

import broker
from broker import OutboundMessage
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.mapping import FASTPATH_VARIANT
from broker.backends.kafka.queue import RedeliveryTracker
from broker.backends.kafka.queue.markers import OffsetRange
from broker.backends.kafka.registration import factory
from broker.testing import wait_until

# Group joins on Tansu take about session.timeout/2: keep them short for both sides.
QUERY = "session_timeout=2&heartbeat_interval=0.3&linger=0.001"


async def fill(backend: KafkaBackend, topic: str, count: int, size: int, partitions: int) -> None:
    await backend.admin.create_topic(topic, partitions)
    payloads = [OutboundMessage(uuid.uuid4().bytes * (size // 16) + b"x" * (size % 16)) for _ in range(count)]
    async with backend.publisher() as publisher:
        handle = publisher.topic(topic)
        chunk = 10_000
        await asyncio.gather(
            *(handle.batch_publish(*payloads[i : i + chunk]) for i in range(0, len(payloads), chunk))
        )


async def plain(backend: KafkaBackend, topic: str, count: int, batch: int) -> float:
    received = 0
    start = None
    cpu_start = 0.0
    seen: set[bytes | None] = set()
    async with backend.batched_records(topic, f"plain-{uuid.uuid4().hex}", batch_size=batch) as batches:
        while received < count:
            records = await batches.next_batch()
            if not records:
                continue
            if start is None:
                start = time.perf_counter()
                cpu_start = time.process_time()
            for record in records:
                seen.add(record.value)  # every value checked, as on the queue side
            received += len(records)
            await broker.commit_highest_offsets(records)
            await batches.commit()  # one synchronous commit per batch: wait for the broker
        assert start is not None
        elapsed = time.perf_counter() - start
        cpu = time.process_time() - cpu_start
        assert len(seen) == count, f"{count - len(seen)} records missing, some read twice"
        print(f"  plain side {elapsed:.2f} s, process CPU {cpu:.2f} s ({cpu / count * 1e6:.2f} us/message)")
        return count / elapsed


def markers_read(tracker: RedeliveryTracker) -> int:
    return sum(state.position for state in tracker.partitions.values())


async def queue(
    backend: KafkaBackend,
    topic: str,
    count: int,
    batch: int,
    latencies: list[tuple[float, int]],
    marker_format: str,
    tuning: dict[str, Any],
) -> tuple[float, float, dict[str, int]]:
    """Consume+ack ``count`` messages; returns (msg/s, seconds the tracker needed after, counts)."""
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {"marker_format": marker_format, **tuning}
    # The tracker runs all along, joined and assigned before the clock starts (a group join on
    # Tansu takes a second or two: an embedded tracker would still be joining during the run).
    async with backend.queue_tracker(topic, **options) as tracker:
        await wait_until(lambda: bool(tracker.partitions), 30)
        received = 0
        start = None
        cpu_start = main_start = 0.0
        seen: set[bytes] = set()
        async with backend.batched_messages(
            topic, f"queue-{uuid.uuid4().hex}", batch_size=batch, embedded_tracker=False, **options
        ) as batches:
            consumer = batches.consumer
            client = consumer.client
            processed = client.processed_ranges
            received_at = 0.0

            # Latency probe: one callback per END write, once the broker confirmed it.
            def timed(ranges: list[OffsetRange]) -> list[Awaitable[Any]]:
                writes = processed(ranges)
                began = received_at
                size = sum(last - first + 1 for _, first, last in ranges)
                done = asyncio.gather(*writes, return_exceptions=True)
                done.add_done_callback(lambda _: latencies.append((loop.time() - began, size)))
                return writes

            client.processed_ranges = timed  # type: ignore[method-assign]
            while received < count:
                messages = await batches.next_batch()
                if not messages:
                    continue
                received_at = loop.time()
                if start is None:
                    start = time.perf_counter()
                    cpu_start = time.process_time()
                    main_start = time.thread_time()
                for message in messages:
                    seen.add(message.data)
                received += len(messages)
                await broker.ack_all(messages)
            await consumer.flush()
            assert start is not None
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            main_cpu = time.thread_time() - main_start
            read = markers_read(tracker)
            assert len(seen) == count, f"{count - len(seen)} messages missing, some received twice"
            log = backend.log()
            written = sum([(await log.watermarks(tp))[1] for tp in tracker.partitions])
            await wait_until(lambda: markers_read(tracker) >= written and tracker.in_progress == 0, 120)
            behind = time.perf_counter() - start - elapsed
            print(
                f"  queue side {elapsed:.2f} s, process CPU {cpu:.2f} s ({cpu / count * 1e6:.2f} us/message, "
                f"tracker included; event loop thread {main_cpu / count * 1e6:.2f}); {written:,} markers "
                f"written, the tracker had read {read:,} at the end and caught up {behind:.2f} s later",
                flush=True,
            )
            counts = dict(consumer.metrics.counts)
            counts["redelivered"] = tracker.metrics.counts["redelivered"]
    return count / elapsed, behind, counts


def ms(values: list[tuple[float, int]], fraction: float) -> float:
    """The ``fraction`` percentile of ``(seconds, messages)`` pairs, in milliseconds, over the messages."""
    ordered = sorted(values)
    rank = fraction * sum(n for _, n in ordered)
    seen = 0
    for value, n in ordered:
        seen += n
        if seen > rank:
            return 1000 * value
    return 1000 * ordered[-1][0] if ordered else float("nan")


async def run(url: str, args: argparse.Namespace) -> float:
    backend = broker.connect(f"{url}?{QUERY}")
    assert isinstance(backend, KafkaBackend)
    plain_rates: list[float] = []
    queue_rates: list[float] = []
    latencies: list[tuple[float, int]] = []
    tracker_behind: list[float] = []
    profiler = cProfile.Profile() if args.profile else None
    tuning = dict(item.split("=", 1) for item in args.queue_option)
    async with backend:
        for round_ in range(args.rounds):
            topic = f"bench-queue-{uuid.uuid4().hex}"
            await fill(backend, topic, args.messages, args.size, args.partitions)
            await backend.admin.create_topic(f"{topic}.markers", args.partitions)
            order = ("plain", "queue") if round_ % 2 == 0 else ("queue", "plain")
            round_latencies: list[tuple[float, int]] = []
            counts: dict[str, int] = {}
            for side in order:
                if side == "plain":
                    plain_rates.append(await plain(backend, topic, args.messages, args.batch))
                else:
                    if profiler is not None:
                        profiler.enable()
                    rate, behind, counts = await queue(
                        backend, topic, args.messages, args.batch, round_latencies, args.markers, tuning
                    )
                    tracker_behind.append(behind)
                    if profiler is not None:
                        profiler.disable()
                    queue_rates.append(rate)
            latencies.extend(round_latencies)
            print(
                f"round {round_ + 1}: plain {plain_rates[-1]:,.0f} msg/s, queue {queue_rates[-1]:,.0f} msg/s "
                f"(ratio {queue_rates[-1] / plain_rates[-1]:.3f}); receive->END p50 "
                f"{ms(round_latencies, 0.5):.1f} ms p95 {ms(round_latencies, 0.95):.1f} ms; "
                f"{counts.get('acked', 0):,} acked, {counts.get('redelivered', 0)} redelivered",
                flush=True,
            )
    if profiler is not None:
        profiler.dump_stats(args.profile)
        print(f"profile of the queue side written to {args.profile}")
    best_plain, best_queue = max(plain_rates), max(queue_rates)
    ratio = best_queue / best_plain
    print()
    median = statistics.median
    print(f"plain consume+commit   best {best_plain:>9,.0f} msg/s (median {median(plain_rates):,.0f})")
    print(f"queue consume+ack      best {best_queue:>9,.0f} msg/s (median {median(queue_rates):,.0f})")
    print(f"receive -> END written p50 {ms(latencies, 0.5):.1f} ms, p95 {ms(latencies, 0.95):.1f} ms (all)")
    sustained = [
        args.messages / (args.messages / r + b) for r, b in zip(queue_rates, tracker_behind, strict=True)
    ]
    print(
        f"tracker caught up      {median(tracker_behind):.2f} s after the last END (median); counting that "
        f"as part of the run: {max(sustained):,.0f} msg/s (ratio {max(sustained) / best_plain:.3f})"
    )
    print(
        f"ratio queue/plain      {ratio:.3f} (median ratio "
        f"{median(queue_rates) / median(plain_rates):.3f}; target >= 0.85, kmq ~0.82)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch (ack_all / commit)")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument(
        "--markers",
        choices=("batched", "per-message"),
        default="batched",
        help="marker format of the queue side (per-message: kafka-mq-go's, one START and END per message)",
    )
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument(
        "--queue-option",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a QueueSettings setting for the queue side (e.g. max_messages_per_poll=500)",
    )
    parser.add_argument("--url", default=None, help="an existing broker (default: start a local Tansu)")
    parser.add_argument("--profile", default=None, help="write a cProfile of the queue side here")
    parser.add_argument(
        "--no-fallback", action="store_true", help="do not repeat the run on the pure-Python hot path"
    )
    parser.add_argument("--ratio-to", default=None, help=argparse.SUPPRESS)  # the child run's output
    args = parser.parse_args()
    print(
        f"{args.messages:,} messages of {args.size} bytes, {args.partitions} partition(s), "
        f"batches of {args.batch}, {args.rounds} rounds, {args.markers} markers; Kafka hot path: "
        f"{FASTPATH_VARIANT}"
    )
    if args.url:
        ratio = asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            ratio = asyncio.run(run(server.url, args))
    if args.ratio_to:
        with open(args.ratio_to, "w") as out:
            out.write(repr(ratio))
    elif FASTPATH_VARIANT.startswith("compiled") and not args.no_fallback:
        fallback = fallback_ratio([arg for arg in sys.argv[1:] if arg != "--no-fallback"])
        shown = f"{fallback:.3f}" if fallback is not None else "failed"
        print(f"ratio queue/plain      compiled {ratio:.3f}, pure Python {shown}")


def fallback_ratio(argv: list[str]) -> float | None:
    """The same run in a child process on the pure-Python hot path; its ratio (None if it failed)."""
    print("\nthe same run on the pure-Python hot path (POLYBROKER_NO_EXTENSIONS=1):", flush=True)
    handle, path = tempfile.mkstemp(suffix=".txt", prefix="polybroker-bench-")
    os.close(handle)
    try:
        env = {**os.environ, "POLYBROKER_NO_EXTENSIONS": "1"}
        with open(os.devnull) as devnull:
            subprocess.call([sys.executable, __file__, *argv, "--ratio-to", path], env=env, stdin=devnull)
        with open(path) as result:
            return float(result.read())
    except (OSError, ValueError):
        return None
    finally:
        os.unlink(path)


if __name__ == "__main__":
    main()
