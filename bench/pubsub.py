"""Pub/Sub: our path and the raw google-cloud-pubsub client side by side, on Google's emulator.

Starts its own emulator through the backend factory (``dev_server()``). Per round, for each side:

* publish: N messages of ``--size`` bytes. Ours: one ``Topic.batch_publish`` (awaited in asyncio).
  Raw: ``PublisherClient.publish`` N times, then ``result()`` on every future. Both clients use
  the same settings (the backend's defaults: batches of 50 messages / 50 ms, at most 800
  outstanding messages; the raw client with the SDK's blocking flow control);
* receive+ack: drain those N messages through streaming pull. Ours: ``backend.receiver`` with 10
  handler tasks, ``await message.ack()`` each. Raw: ``SubscriberClient.subscribe`` with its
  default 10-thread pool, ``message.ack()`` each. Same flow control on both.

The rounds alternate the two sides; the best rate of each is compared (ours / raw), as the
emulator and the machine are shared and noisy. Target: both ratios >= 0.90.

Usage: python bench/pubsub.py [--messages 20000] [--size 100] [--rounds 3]
"""

from __future__ import annotations

# ruff: noqa: E402  (the sys.path fix below must run before the imports)
import sys
from pathlib import Path

# Run as a script, this folder comes first on sys.path, where bench/queue.py would shadow the
# standard library's queue module (which grpc and urllib3 import): use the project root instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse
import asyncio
import statistics
import threading
import time
import uuid
from typing import Any

import grpc  # type: ignore[import-untyped]
from google.cloud import pubsub_v1  # type: ignore[import-untyped]
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

import broker
from broker.backends.pubsub.backend import PubsubBackend
from broker.backends.pubsub.registration import factory
from broker.backends.pubsub.settings import PubsubSettings
from broker.message import Message, OutboundMessage

CHANNEL_OPTIONS = [("grpc.max_send_message_length", -1), ("grpc.max_receive_message_length", -1)]


def raw_clients(host: str) -> tuple[Any, Any]:
    settings = PubsubSettings(project="x")
    publisher = pubsub_v1.PublisherClient(
        pubsub_v1.types.BatchSettings(
            max_bytes=settings.publish_byte_threshold,
            max_latency=settings.publish_delay_threshold,
            max_messages=settings.publish_count_threshold,
        ),
        pubsub_v1.types.PublisherOptions(
            flow_control=pubsub_v1.types.PublishFlowControl(
                message_limit=settings.publish_max_outstanding_messages,
                byte_limit=settings.publish_max_outstanding_bytes,
                limit_exceeded_behavior=pubsub_v1.types.LimitExceededBehavior.BLOCK,
            ),
            timeout=settings.publish_timeout,
        ),
        transport=PublisherGrpcTransport(
            channel=grpc.insecure_channel(host, options=CHANNEL_OPTIONS), host=host
        ),
    )
    subscriber = pubsub_v1.SubscriberClient(
        transport=SubscriberGrpcTransport(
            channel=grpc.insecure_channel(host, options=CHANNEL_OPTIONS), host=host
        )
    )
    return publisher, subscriber


def raw_flow_control() -> Any:
    settings = PubsubSettings(project="x")
    return pubsub_v1.types.FlowControl(
        max_bytes=settings.receive_max_outstanding_bytes,
        max_messages=settings.receive_max_outstanding_messages,
        max_lease_duration=settings.receive_max_extension,
        max_duration_per_lease_extension=int(settings.receive_max_extension_period),
    )


def raw_publish(publisher: Any, topic: str, payloads: list[bytes]) -> tuple[float, float]:
    start, cpu = time.perf_counter(), time.process_time()
    futures = [publisher.publish(topic, payload) for payload in payloads]
    for future in futures:
        future.result()
    return len(payloads) / (time.perf_counter() - start), (time.process_time() - cpu) / len(payloads)


def raw_receive(subscriber: Any, subscription: str, count: int) -> tuple[float, float]:
    lock = threading.Lock()
    done = threading.Event()
    received = 0

    def callback(message: Any) -> None:
        nonlocal received
        message.ack()
        with lock:
            received += 1
            if received == count:
                done.set()

    start, cpu = time.perf_counter(), time.process_time()
    future = subscriber.subscribe(subscription, callback, flow_control=raw_flow_control())
    if not done.wait(300):
        raise RuntimeError(f"raw receive got {received} of {count}")
    elapsed, used = time.perf_counter() - start, time.process_time() - cpu
    future.cancel()
    future.result(timeout=30)
    return count / elapsed, used / count


async def our_publish(backend: PubsubBackend, topic: str, payloads: list[bytes]) -> tuple[float, float]:
    messages = [OutboundMessage(payload) for payload in payloads]
    handle = backend.publisher().topic(topic)
    await handle.publish(OutboundMessage(b"warm-up"))  # the topic lookup, outside the clock
    start, cpu = time.perf_counter(), time.process_time()
    await handle.batch_publish(*messages)
    return len(messages) / (time.perf_counter() - start), (time.process_time() - cpu) / len(messages)


async def our_receive(
    backend: PubsubBackend, topic: str, subscription: str, count: int
) -> tuple[float, float]:
    received = 0
    done = asyncio.Event()

    async def handler(message: Message) -> None:
        nonlocal received
        await message.ack()
        received += 1
        if received == count:
            done.set()

    receiver = backend.receiver(topic, subscription, concurrency=10)
    start, cpu = time.perf_counter(), time.process_time()
    task = asyncio.ensure_future(receiver.receive(handler))
    try:
        async with asyncio.timeout(300):
            await done.wait()
    finally:
        elapsed, used = time.perf_counter() - start, time.process_time() - cpu
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    return count / elapsed, used / count


async def one_round(
    url: str, host: str, count: int, size: int, results: dict[str, list[tuple[float, float]]]
) -> None:
    run = uuid.uuid4().hex[:8]
    payloads = [(b"%08d" % i) + b"x" * max(0, size - 8) for i in range(count)]
    backend = broker.connect(url)
    assert isinstance(backend, PubsubBackend)
    async with backend:
        ours_topic, raw_topic = f"bench-ours-{run}", f"bench-raw-{run}"
        await backend.ensure_subscription(ours_topic, f"{ours_topic}-sub")
        await backend.ensure_subscription(raw_topic, f"{raw_topic}-sub")
        raw_publisher, raw_subscriber = raw_clients(host)
        project = backend.settings.project
        try:
            raw_rate = await asyncio.to_thread(
                raw_publish, raw_publisher, f"projects/{project}/topics/{raw_topic}", payloads
            )
            ours_rate = await our_publish(backend, ours_topic, payloads)
            results["publish raw"].append(raw_rate)
            results["publish ours"].append(ours_rate)
            count_ours = count + 1  # the warm-up message
            ours_rx = await our_receive(backend, ours_topic, f"{ours_topic}-sub", count_ours)
            raw_rx = await asyncio.to_thread(
                raw_receive, raw_subscriber, f"projects/{project}/subscriptions/{raw_topic}-sub", count
            )
            results["receive+ack raw"].append(raw_rx)
            results["receive+ack ours"].append(ours_rx)
            print(
                f"  round: publish raw {raw_rate[0]:,.0f}/s ours {ours_rate[0]:,.0f}/s; "
                f"receive+ack raw {raw_rx[0]:,.0f}/s ours {ours_rx[0]:,.0f}/s",
                flush=True,
            )
        finally:
            raw_publisher.stop()
            raw_subscriber.close()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=20_000)
    parser.add_argument("--size", type=int, default=100)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    results: dict[str, list[tuple[float, float]]] = {
        "publish raw": [],
        "publish ours": [],
        "receive+ack raw": [],
        "receive+ack ours": [],
    }
    with factory.dev_server() as server:
        host = server.url.split("emulator_host=")[1]
        print(f"emulator at {host}; {args.messages:,} messages of {args.size} bytes, {args.rounds} rounds")
        for _ in range(args.rounds):
            asyncio.run(one_round(server.url, host, args.messages, args.size, results))
    failed = False
    print("best of the rounds; CPU = this process's CPU time (all threads) per message, median")
    for what in ("publish", "receive+ack"):
        raw, ours = results[f"{what} raw"], results[f"{what} ours"]
        raw_rate, ours_rate = max(r for r, _ in raw), max(r for r, _ in ours)
        raw_cpu, ours_cpu = statistics.median(c for _, c in raw), statistics.median(c for _, c in ours)
        ratio = ours_rate / raw_rate
        failed |= ratio < 0.9
        print(
            f"{what:<12} raw {raw_rate:>9,.0f} msg/s ({raw_cpu * 1e6:.0f} us CPU)   "
            f"ours {ours_rate:>9,.0f} msg/s ({ours_cpu * 1e6:.0f} us CPU)   ratio {ratio:.2f}"
        )
    if failed:
        print("below the 0.90 target")
        sys.exit(1)


if __name__ == "__main__":
    main()
