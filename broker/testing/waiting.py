"""Waiting helpers for tests: pull a number of messages, drain a consumer, wait for a condition.

Each gives up with ``TimeoutError`` after the time it is given, so a test that would wait forever
fails instead.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

from broker.interfaces import MessageIterator, RecordIterator
from broker.message import Message, Record

__all__ = ["collect", "collect_records", "drain", "wait_until"]


async def collect(
    iterator: MessageIterator, count: int, timeout: float, *, ack: bool = True
) -> list[Message]:
    """Pull ``count`` messages (acking each unless ``ack=False``); fails after ``timeout`` seconds."""
    out: list[Message] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            message = await iterator.next_message()
            if ack:
                await message.ack()
            out.append(message)
    return out


async def collect_records(iterator: RecordIterator, count: int, timeout: float) -> list[Record]:
    """Pull ``count`` records; fails after ``timeout`` seconds."""
    out: list[Record] = []
    async with asyncio.timeout(timeout):
        while len(out) < count:
            out.append(await iterator.next_record())
    return out


async def drain(iterator: MessageIterator, quiet: float) -> list[Message]:
    """Pull (and ack) until nothing arrives for ``quiet`` seconds; what arrived."""
    out: list[Message] = []
    while True:
        try:
            message = await iterator.next_message(timeout=quiet)
        except TimeoutError:
            return out
        await message.ack()
        out.append(message)


async def wait_until(condition: Callable[[], bool], timeout: float, interval: float = 0.02) -> None:
    """Wait until ``condition()`` holds; ``TimeoutError`` after ``timeout`` seconds.

    For conditions with no event to wait on (state another task or process changes).
    """
    async with asyncio.timeout(timeout):
        while not condition():  # noqa: ASYNC110 - there is no event to wait on
            await asyncio.sleep(interval)
