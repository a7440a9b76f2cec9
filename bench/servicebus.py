"""Service Bus backend vs the raw azure-servicebus SDK (aio), against the FAKE server in its own process.

The fake (``python -m tests.servicebus_fake``) speaks the SDK's wire protocol; it is not Azure, so
the absolute figures say little about the service; the ratio ours/raw says what our layer costs.

(a) publish: 10,000 messages of 100 bytes, in ``batch_publish`` calls of 1,000 (ours) versus
    filling and splitting ``ServiceBusMessageBatch`` objects for the same chunks (raw);
(b) receive+settle: the 10,000 messages, 100 per receive call, each completed in turn: ours
    ``next_batch()`` + ``ack()`` versus raw ``receive_messages(100)`` + ``complete_message()``
    (both clocks include opening the receiver); and ours with ``broker.ack_all``, for information.

Queues are made by the fake on first use, as the raw side expects, so ours connects with
``create_missing=false`` (no management request inside the clock; the raw SDK makes none either).

Each path runs on a fresh queue, ``--rounds`` times (5; raw and ours taking turns to go first); the
best run counts, and the ratio of the medians is printed beside.

Usage: python bench/servicebus.py [--messages N] [--rounds N]
"""

from __future__ import annotations

# ruff: noqa: E402  (the sys.path fix below must run before the imports)
import sys
from pathlib import Path

# Run as a script, this folder comes first on sys.path, where bench/queue.py would shadow the
# standard library's queue module (which urllib3 imports): use the project root instead.
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE]
sys.path.insert(0, str(_HERE.parent))

import argparse
import asyncio
import contextlib
import os
import statistics
import subprocess
import time
import uuid
from collections.abc import Awaitable, Callable, Iterator

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.exceptions import MessageSizeExceededError

import broker
from broker import OutboundMessage
from broker.driver.devserver import free_port, wait_for_port

ROOT = Path(__file__).resolve().parent.parent
PAYLOAD = b"x" * 100
CHUNK = 1000
RECEIVE_BATCH = 100


@contextlib.contextmanager
def fake_server() -> Iterator[str]:
    """The fake in a subprocess (its own core); yields its connection string."""
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.servicebus_fake", "--port", str(port)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_for_port("127.0.0.1", port, 20, alive=lambda: process.poll() is None)
        assert process.stdout is not None
        yield process.stdout.readline().decode().strip()
    finally:
        process.terminate()
        try:
            process.wait(10)
        except subprocess.TimeoutExpired:
            process.kill()


# -- raw SDK -------------------------------------------------------------------------------------
async def raw_publish(connection: str, queue: str, count: int) -> float:
    async with (
        ServiceBusClient.from_connection_string(connection) as client,
        client.get_queue_sender(queue) as sender,
    ):
        await sender.create_message_batch()  # opens the link before the clock starts
        start = time.perf_counter()
        for offset in range(0, count, CHUNK):
            batch = await sender.create_message_batch()
            for _ in range(min(CHUNK, count - offset)):
                message = ServiceBusMessage(PAYLOAD)
                try:
                    batch.add_message(message)
                except MessageSizeExceededError:
                    await sender.send_messages(batch)
                    batch = await sender.create_message_batch()
                    batch.add_message(message)
            if len(batch):
                await sender.send_messages(batch)
        return time.perf_counter() - start


async def raw_receive(connection: str, queue: str, count: int) -> float:
    async with ServiceBusClient.from_connection_string(connection) as client:
        start = time.perf_counter()  # both sides' clocks include opening the receiver
        receiver = client.get_queue_receiver(queue)
        await receiver.__aenter__()
        received = 0
        while received < count:
            messages = await receiver.receive_messages(max_message_count=RECEIVE_BATCH, max_wait_time=5)
            for message in messages:
                await receiver.complete_message(message)
            received += len(messages)
        elapsed = time.perf_counter() - start
        await receiver.close()
        return elapsed


# -- polybroker ----------------------------------------------------------------------------------
async def ours_publish(connection: str, queue: str, count: int) -> float:
    async with broker.connect({"url": connection, "create_missing": False}) as backend:
        topic = backend.publisher().topic(queue)
        chunks = [
            [OutboundMessage(PAYLOAD) for _ in range(min(CHUNK, count - o))] for o in range(0, count, CHUNK)
        ]
        await topic.batch_publish(OutboundMessage(PAYLOAD))  # opens the link before the clock starts
        start = time.perf_counter()
        for chunk in chunks:
            await topic.batch_publish(*chunk)
        elapsed = time.perf_counter() - start
    return elapsed


async def _ours_receive(connection: str, queue: str, count: int, bulk: bool) -> float:
    async with broker.connect({"url": connection, "create_missing": False}) as backend:
        start = time.perf_counter()  # both sides' clocks include opening the receiver
        batches = backend.batched_messages(queue, "", batch_size=RECEIVE_BATCH, batch_timeout=5)
        received = 0
        while received < count:
            messages = await batches.next_batch()
            if bulk:
                await broker.ack_all(messages)
            else:
                for message in messages:
                    await message.ack()
            received += len(messages)
        elapsed = time.perf_counter() - start
        await batches.close()
        return elapsed


async def ours_receive(connection: str, queue: str, count: int) -> float:
    return await _ours_receive(connection, queue, count, bulk=False)


async def ours_receive_bulk(connection: str, queue: str, count: int) -> float:
    return await _ours_receive(connection, queue, count, bulk=True)


async def fill(connection: str, queue: str, count: int) -> None:
    """Put ``count`` messages on ``queue`` (untimed) for a receive run."""
    async with broker.connect({"url": connection, "create_missing": False}) as backend:
        topic = backend.publisher().topic(queue)
        for offset in range(0, count, CHUNK):
            await topic.batch_publish(*(OutboundMessage(PAYLOAD) for _ in range(min(CHUNK, count - offset))))


Run = Callable[[str, str, int], Awaitable[float]]


async def best(connection: str, run: Run, count: int, rounds: int, prefill: bool) -> float:
    """The best throughput (messages/s) of ``rounds`` runs, each on a fresh queue."""
    rates = []
    for _ in range(rounds):
        queue = f"bench-{uuid.uuid4().hex[:8]}"
        if prefill:
            await fill(connection, queue, count)
        rates.append(count / await run(connection, queue, count))
    return max(rates)


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=10_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    count, rounds = args.messages, args.rounds
    with fake_server() as connection:
        publish: dict[str, list[float]] = {"raw": [], "ours": []}
        receive: dict[str, list[float]] = {"raw": [], "ours": []}
        for round_ in range(rounds):
            # Alternate the order, so that drift on a shared machine does not favour one side.
            sides = ("raw", "ours") if round_ % 2 == 0 else ("ours", "raw")
            for side in sides:
                run = raw_publish if side == "raw" else ours_publish
                publish[side].append(await best(connection, run, count, 1, False))
            for side in sides:
                run = raw_receive if side == "raw" else ours_receive
                receive[side].append(await best(connection, run, count, 1, True))
        bulk = [await best(connection, ours_receive_bulk, count, 1, True) for _ in range(rounds)]
        results = {
            "publish (batches of 1000)": (publish["raw"], publish["ours"]),
            "receive+settle (100 per call)": (receive["raw"], receive["ours"]),
            "receive+ack_all (ours, bulk)": (receive["raw"], bulk),
        }
    print(
        f"Service Bus vs the FAKE server (tests.servicebus_fake), {count:,} messages of {len(PAYLOAD)} bytes,"
        f" best of {rounds} rounds"
    )
    print(f"{'path':32} {'raw SDK msg/s':>14} {'ours msg/s':>12} {'ours/raw':>9} {'median ratio':>13}")
    for name, (raw, ours) in results.items():
        median = statistics.median(ours) / statistics.median(raw)
        print(f"{name:32} {max(raw):14,.0f} {max(ours):12,.0f} {max(ours) / max(raw):9.2f} {median:13.2f}")


if __name__ == "__main__":
    asyncio.run(main())
