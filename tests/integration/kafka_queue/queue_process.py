"""A queue consumer or redelivery tracker in its own process, for the tests that SIGKILL it.

    python -m tests.integration.kafka_queue.queue_process consumer '<json>'
    python -m tests.integration.kafka_queue.queue_process tracker '<json>'

The JSON object holds ``url`` (a ``kafka://`` URL), ``config`` (QueueSettings fields) and, for a
consumer, ``queue_id`` and ``count``. The process reports on stdout, one line each:

* consumer: ``got <id> <data>`` for each of the first ``count`` messages received (never settled,
  kept alive by the consumer), then ``holding``; it then holds them until it is killed.
* tracker: ``assigned <n>`` whenever its number of markers partitions changes and
  ``tracking <n>`` whenever its count of in-progress messages changes; it runs until killed.
"""

from __future__ import annotations

import asyncio
import json
import sys
from typing import Any

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.queue import QueueService, QueueSettings


def say(line: str) -> None:
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


async def consumer(backend: KafkaBackend, spec: dict[str, Any]) -> None:
    service = QueueService(backend.log(), QueueSettings(**spec["config"]))
    consumer = service.consumer(spec["queue_id"])
    held = []
    for _ in range(spec["count"]):
        message = await consumer.receive()
        held.append(message)
        say(f"got {message.id} {message.data.decode()}")
    say("holding")
    await asyncio.Event().wait()  # hold (and keep alive) until SIGKILL


async def tracker(backend: KafkaBackend, spec: dict[str, Any]) -> None:
    service = QueueService(backend.log(), QueueSettings(**spec["config"]))
    tracker = service.tracker()
    tracker.start()
    assigned = tracking = -1
    while True:
        if len(tracker.partitions) != assigned:
            assigned = len(tracker.partitions)
            say(f"assigned {assigned}")
        if tracker.in_progress != tracking:
            tracking = tracker.in_progress
            say(f"tracking {tracking}")
        await asyncio.sleep(0.02)


async def main(role: str, spec: dict[str, Any]) -> None:
    backend = broker.connect(spec["url"])
    assert isinstance(backend, KafkaBackend)
    async with backend:
        await (consumer if role == "consumer" else tracker)(backend, spec)


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], json.loads(sys.argv[2])))
