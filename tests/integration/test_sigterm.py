"""A consumer process run by ``broker.run`` on a real nats-server (JetStream), stopped with SIGTERM
under load: it exits 0, handlers running at the signal finish, the ones that cannot finish within
``drain_timeout`` are nacked, and nothing is lost or acked without being handled."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import uuid
from collections import Counter
from collections.abc import Iterator

import pytest

import broker
from broker.driver.devserver import ProcessServer
from broker.message import OutboundMessage
from tests.integration.jetstream.server import running_nats_server

#: The consumer: prints ``ready``, ``took N`` when a handler starts, ``acked N`` once ``ack()``
#: returned. Every 40th message takes far longer than the drain timeout.
CONSUMER = """
import asyncio, json, sys
import broker

config = json.loads(sys.argv[1])

def say(line):
    sys.stdout.write(line + "\\n")
    sys.stdout.flush()

async def handler(message):
    value = int(message.data)
    say(f"took {value}")
    await asyncio.sleep(60 if value % 40 == 39 else 0.02)
    await message.ack()
    say(f"acked {value}")

async def main():
    backend = broker.connect(config["url"])
    async with backend.messages(config["topic"], config["subscription"], **config["options"]):
        pass
    receiver = backend.receiver(
        config["topic"], config["subscription"], concurrency=4, **config["options"]
    )
    say("ready")
    return await broker.run((receiver, handler), backends=[backend], drain_timeout=config["drain"])

sys.exit(asyncio.run(main()))
"""

COUNT = 300
OPTIONS = {"ack_deadline": 2.0}


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


async def test_sigterm_drains_and_loses_nothing(nats_server: ProcessServer) -> None:
    topic, sub = f"sigterm-{uuid.uuid4().hex[:8]}", "workers"
    config = {"url": nats_server.url, "topic": topic, "subscription": sub, "options": OPTIONS, "drain": 1.0}
    async with broker.connect(nats_server.url) as backend:
        async with backend.messages(topic, sub, **OPTIONS):
            pass
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-c", CONSUMER, json.dumps(config), stdout=asyncio.subprocess.PIPE
        )
        assert process.stdout is not None
        took: set[int] = set()
        acked: set[int] = set()

        def read(line: bytes) -> None:
            word, _, value = line.decode().strip().partition(" ")
            if word == "took":
                took.add(int(value))
            elif word == "acked":
                acked.add(int(value))

        try:
            async with asyncio.timeout(30):
                while (await process.stdout.readline()).strip() != b"ready":
                    assert process.returncode is None, "the consumer exited before it was ready"
            await (
                backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(COUNT)))
            )
            async with asyncio.timeout(30):
                while len(acked) < 60:  # under load: handlers running, messages queued
                    line = await process.stdout.readline()
                    assert line, "the consumer died before the signal"
                    read(line)
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(20):  # drain_timeout 1 s: no hang
                rest_of_output = await process.stdout.read()
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        for line in rest_of_output.splitlines():
            read(line)
        assert code == 0
        unfinished = took - acked
        assert unfinished, "expected slow handlers cut off by the drain timeout"
        assert all(v % 40 == 39 for v in unfinished), f"fast handlers did not finish: {unfinished}"

        rest: Counter[int] = Counter()
        async with backend.messages(topic, sub, **OPTIONS) as consumer, asyncio.timeout(30):
            while acked | set(rest) != set(range(COUNT)):
                message = await consumer.next_message()
                await message.ack()
                rest[int(message.data)] += 1
        assert not (acked & set(rest)), f"acked by the drained consumer, delivered again: {acked & set(rest)}"
        assert unfinished <= set(rest), "a handler that did not finish had its message acked"
        assert max(rest.values()) == 1
