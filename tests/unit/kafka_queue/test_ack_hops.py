"""Acking a message of the Kafka ``messages()`` queue crosses few modules: consumer -> client ->
markers -> log.

The whole ack is traced with ``sys.setprofile``: ``Message.ack()`` and the END marker it causes
(acks of one event-loop pass are merged into one END, written on the next pass). Calls made by
other tasks (the polling loop, keep-alives) are left out: only code running in the ack's context
counts. The log implementation counts as one hop, whatever it calls below its ``send``.
"""

from __future__ import annotations

import asyncio
import contextvars
import sys
import uuid
from types import FrameType
from typing import Any

import pytest

import broker
from broker.backends.inmem import InmemBackend
from broker.backends.kafka.queue import QueueSettings, open_messages
from broker.log import TopicPartition

#: Set only in the context of the traced ack (copied into the callbacks and tasks it schedules).
_ACKING: contextvars.ContextVar[bool] = contextvars.ContextVar("acking", default=False)

#: Where every ack starts (the application calls it), not a hop.
_ENTRY = "broker.message"
#: Observers of the path, not hops on it: counters (see ``QueueMetrics``).
_OBSERVERS = frozenset({"broker.backends.kafka.queue.metrics"})


def _module(frame: FrameType) -> str:
    return str(frame.f_globals.get("__name__", ""))


async def _hops(message: broker.Message, log_package: str) -> list[str]:
    """Our modules the ack of ``message`` enters, in order; the log implementation is ``log``."""
    entered: list[str] = []

    def profile(frame: FrameType, event: str, arg: Any) -> None:
        if event != "call" or not _ACKING.get():
            return
        name = _module(frame)
        if not name.startswith(("backends.", "broker.")):
            return
        caller: FrameType | None = frame
        while caller is not None:  # anything the log implementation calls is the log
            if _module(caller).startswith(log_package):
                name = "log"
                break
            caller = caller.f_back
        if name != _ENTRY and name not in _OBSERVERS and name not in entered:
            entered.append(name)

    async def ack() -> None:
        _ACKING.set(True)
        await message.ack()
        for _ in range(3):  # the END write of this pass, and its completion callbacks
            await asyncio.sleep(0)

    sys.setprofile(profile)
    try:
        await asyncio.create_task(ack())
    finally:
        sys.setprofile(None)
    return entered


@pytest.mark.parametrize("marker_format", ["batched", "per-message"])
async def test_an_ack_crosses_at_most_four_modules(marker_format: str) -> None:
    backend = broker.connect(f"inmem://hops-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        log = backend.log()
        await log.create_topic("events", 2)
        await log.produce("events", b"payload", key="k")
        config = QueueSettings(
            message_topic="events",
            marker_topic="events-markers",
            marker_format=marker_format,
            next_message_timeout=0.05,
        )
        async with open_messages(log, config, "audit", embedded_tracker=False) as messages:
            message = await messages.next_message(timeout=5)
            hops = await _hops(message, type(log).__module__.rpartition(".")[0])
            markers = 0
            for partition in range(await log.partitions("events-markers")):
                markers += (await log.watermarks(TopicPartition("events-markers", partition)))[1]

    assert hops[-1:] == ["log"], f"the END marker was not written during the ack: {hops}"
    assert markers >= 2, "START and END markers"
    assert len(hops) <= 4, f"an ack crosses {len(hops)} modules: {' -> '.join(hops)}"
    assert set(hops) == {
        "broker.backends.kafka.queue.consumer",
        "broker.backends.kafka.queue.client",
        "broker.backends.kafka.queue.markers",
        "log",
    }
