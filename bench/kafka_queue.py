"""The marker-topic queue against plain Kafka consumption, on one local Tansu broker.

(Named kafka_queue.py, not queue.py: a ``bench/queue.py`` would shadow the standard library's ``queue``
module for every script run from this folder.)

Both sides read the same records: ``--messages`` (100,000) values of ``--size`` (100) bytes, in one
topic of ``--partitions`` (1) partition(s), each side with a fresh consumer group or subscription.

plain
    ``batched_records(topic, group, batch_size=B).next_batch()``, read every value, then
    ``broker.commit_highest_offsets(batch)`` (one synchronous commit per batch).
queue (per-message acknowledgement)
    ``batched_messages(topic, subscription, batch_size=B).next_batch()``, read every value, then
    ``broker.ack_all(batch)``; at the end ``flush()`` waits for the last END markers. The queue
    consumer writes a START marker per message (a batch's together, before its one commit) and an
    END per ack (pipelined). A redelivery tracker (``queue_tracker(topic)``) runs all along in the
    same process, reading every START and END; it joins its group before the clock starts (an
    embedded one would still be joining during a short run). How long it needs after the last END
    to read everything is printed too.

Both sides use ``linger=0.001`` (kafka-mq-go's marker producer uses ``linger.ms=1``; only the queue
side produces). Throughput: the clock starts at the first non-empty batch (group joins are not
timed) and stops when every message is committed (plain) or acked with its END written (queue).
Latency (queue side): from ``next_batch()`` returning a message to the broker confirming its END
marker (the delivery reports of the batch's END markers), p50 and p95 over every message.

Each side runs ``--rounds`` times, alternating which goes first; a side's figure is its best round
(the machines are shared; the best round is the least disturbed one). kmq, the JVM original,
published about 0.82 of plain Kafka (research/peers.md §2.1); the target here is at least 0.85.

Usage: python bench/kafka_queue.py [--messages N] [--size B] [--batch N] [--partitions N] [--rounds N]
       [--url kafka://...] [--profile FILE]
"""

from __future__ import annotations

import argparse
import asyncio
import cProfile
import statistics
import time
import uuid
from collections.abc import Awaitable, Iterable
from typing import Any

import broker
from backends.kafka.backend import KafkaBackend
from backends.kafka.queue import MessageId, RedeliveryTracker
from backends.kafka.registration import factory
from broker import OutboundMessage
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
    async with backend.batched_records(topic, f"plain-{uuid.uuid4().hex}", batch_size=batch) as batches:
        while received < count:
            records = await batches.next_batch()
            if not records:
                continue
            if start is None:
                start = time.perf_counter()
            for record in records:
                record.value  # noqa: B018 - read every value, as the queue side does
            received += len(records)
            await broker.commit_highest_offsets(records)
        assert start is not None
        return count / (time.perf_counter() - start)


def markers_read(tracker: RedeliveryTracker) -> int:
    return sum(state.position for state in tracker.partitions.values())


async def queue(
    backend: KafkaBackend, topic: str, count: int, batch: int, latencies: list[float]
) -> tuple[float, float, dict[str, int]]:
    """Consume+ack ``count`` messages; returns (msg/s, seconds the tracker needed after, counts)."""
    loop = asyncio.get_running_loop()
    options: dict[str, Any] = {"max_messages_per_poll": batch}
    # The tracker runs all along, joined and assigned before the clock starts (a group join on
    # Tansu takes a second or two: an embedded tracker would still be joining during the run).
    async with backend.queue_tracker(topic, **options) as tracker:
        await wait_until(lambda: bool(tracker.partitions), 30)
        received = 0
        start = None
        cpu_start = 0.0
        seen: set[bytes] = set()
        async with backend.batched_messages(
            topic, f"queue-{uuid.uuid4().hex}", batch_size=batch, embedded_tracker=False, **options
        ) as batches:
            consumer = batches.consumer
            client = consumer.client
            processed = client.processed
            received_at = 0.0

            # Latency probe: one callback per batch, once the broker confirmed every END of it.
            def timed(ids: Iterable[MessageId]) -> list[Awaitable[Any]]:
                writes = processed(ids)
                began = received_at
                size = len(writes)
                done = asyncio.gather(*writes, return_exceptions=True)
                done.add_done_callback(lambda _: latencies.extend([loop.time() - began] * size))
                return writes

            client.processed = timed  # type: ignore[method-assign]
            while received < count:
                messages = await batches.next_batch()
                if not messages:
                    continue
                received_at = loop.time()
                if start is None:
                    start = time.perf_counter()
                    cpu_start = time.process_time()
                for message in messages:
                    seen.add(message.data)
                received += len(messages)
                await broker.ack_all(messages)
            await consumer.flush()
            assert start is not None
            elapsed = time.perf_counter() - start
            cpu = time.process_time() - cpu_start
            read = markers_read(tracker)
            assert len(seen) == count, f"{count - len(seen)} messages missing, some received twice"
            # START + END per message (the tracker's position counts them; no keep-alives at 60 s)
            await wait_until(lambda: markers_read(tracker) >= 2 * count and tracker.in_progress == 0, 120)
            behind = time.perf_counter() - start - elapsed
            print(
                f"  queue side {elapsed:.2f} s, process CPU {cpu:.2f} s ({cpu / count * 1e6:.1f} us/message, "
                f"tracker included); tracker had read {read:,} of {2 * count:,} markers at the end, "
                f"caught up {behind:.2f} s later",
                flush=True,
            )
            counts = dict(consumer.metrics.counts)
            counts["redelivered"] = tracker.metrics.counts["redelivered"]
    return count / elapsed, behind, counts


def ms(values: list[float], fraction: float) -> float:
    """The ``fraction`` percentile of ``values`` (seconds), in milliseconds."""
    ordered = sorted(values)
    return 1000 * ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def run(url: str, args: argparse.Namespace) -> float:
    backend = broker.connect(f"{url}?{QUERY}")
    assert isinstance(backend, KafkaBackend)
    plain_rates: list[float] = []
    queue_rates: list[float] = []
    latencies: list[float] = []
    tracker_behind: list[float] = []
    profiler = cProfile.Profile() if args.profile else None
    async with backend:
        for round_ in range(args.rounds):
            topic = f"bench-queue-{uuid.uuid4().hex}"
            await fill(backend, topic, args.messages, args.size, args.partitions)
            await backend.admin.create_topic(f"{topic}.markers", args.partitions)
            order = ("plain", "queue") if round_ % 2 == 0 else ("queue", "plain")
            round_latencies: list[float] = []
            counts: dict[str, int] = {}
            for side in order:
                if side == "plain":
                    plain_rates.append(await plain(backend, topic, args.messages, args.batch))
                else:
                    if profiler is not None:
                        profiler.enable()
                    rate, behind, counts = await queue(
                        backend, topic, args.messages, args.batch, round_latencies
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
        f"tracker caught up      {median(tracker_behind):.2f} s after the last END (median); counting that, "
        f"the queue sustains {max(sustained):,.0f} msg/s (ratio {max(sustained) / best_plain:.3f})"
    )
    print(
        f"ratio queue/plain      {ratio:.3f} (median ratio "
        f"{median(queue_rates) / median(plain_rates):.3f}; target >= 0.85, kmq ~0.82)"
    )
    return ratio


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--size", type=int, default=100, help="payload bytes")
    parser.add_argument("--batch", type=int, default=500, help="messages per batch (ack_all / commit)")
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--url", default=None, help="an existing broker (default: start a local Tansu)")
    parser.add_argument("--profile", default=None, help="write a cProfile of the queue side here")
    args = parser.parse_args()
    print(
        f"{args.messages:,} messages of {args.size} bytes, {args.partitions} partition(s), "
        f"batches of {args.batch}, {args.rounds} rounds"
    )
    if args.url:
        asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            print(f"Tansu at {server.url}")
            asyncio.run(run(server.url, args))


if __name__ == "__main__":
    main()
