"""The Pulsar fetcher's loop side: nothing reaches a caller after close."""

from __future__ import annotations

import asyncio
import threading

import pytest

from broker.backends.pulsar.fetcher import Fetcher
from broker.errors import ClosedError


async def test_a_chunk_received_before_close_is_not_handed_out_after_it() -> None:
    taken = threading.Event()
    go = threading.Event()
    sent = []

    def receive(timeout_ms: int) -> str:
        if sent:  # one message, then the thread would wait in the client: end it here
            go.wait(5)
            raise RuntimeError("stop")
        taken.set()
        go.wait(5)
        sent.append("m")
        return "m"

    fetcher = Fetcher(receive, None, limit=10, name="t")
    fetcher.start(asyncio.get_running_loop())
    assert await asyncio.to_thread(taken.wait, 5)
    fetcher.close()  # the receive call already has a message in hand
    go.set()
    for _ in range(50):  # let the thread post its chunk to the loop
        await asyncio.sleep(0.01)
        if sent:
            break
    await asyncio.sleep(0.05)
    assert fetcher.ready() is None
    with pytest.raises(ClosedError):
        await fetcher.take(0.1)
