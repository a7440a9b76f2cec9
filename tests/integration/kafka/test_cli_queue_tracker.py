"""``broker queue tracker`` against a real broker: it redelivers what a consumer without a tracker left."""

from __future__ import annotations

import asyncio
import os
import signal
import sys

import broker
from broker.message import OutboundMessage
from broker.testing import collect


async def test_the_command_redelivers_for_consumers_without_their_own_tracker(kafka_url: str) -> None:
    topic = f"cli-tracker-{os.getpid()}"
    async with broker.connect(kafka_url) as backend:
        await backend.admin.create_topic(topic, 1)  # type: ignore[attr-defined]
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker.cli",
            "queue",
            "tracker",
            kafka_url,
            topic,
            "--ack-deadline",
            "1",
            stderr=asyncio.subprocess.PIPE,
        )
        try:
            async with backend.messages(topic, "cli", ack_deadline=1.0, embedded_tracker=False) as consumer:
                await backend.publisher().topic(topic).publish(OutboundMessage(b"left-behind"))
                (first,) = await collect(consumer, 1, 20, ack=False)
                (again,) = await collect(consumer, 1, 30)
            assert again.data == b"left-behind" and again.delivery_attempt == 2 and again.id == first.id
        finally:
            process.send_signal(signal.SIGINT)
            _, err = await asyncio.wait_for(process.communicate(), 20)
        assert process.returncode == 0, err.decode()
        assert b"redelivered 1" in err
