"""``broker.driver.pulled.BufferedPull``: the polling consumer SQS and Redis share.

A poll that brings several messages is shared by every take; a take that times out leaves it
running for the next (nothing it brings is dropped); close waits for the poll in flight and hands
back everything nobody took, so the backend can release it at once.
"""

from __future__ import annotations

import asyncio

import pytest

from broker.driver.pulled import BufferedPull, PulledMessageIteration
from broker.errors import ClosedError, Timeout
from broker.message import Message


class _Polls(BufferedPull, PulledMessageIteration):
    """Each ``_fetch`` waits for the test to answer it with a list of payloads."""

    def __init__(self) -> None:
        self.topic = "t"
        self.answers: asyncio.Queue[list[bytes]] = asyncio.Queue()
        self.fetches = 0
        self._init_pull()

    async def _fetch(self, limit: int) -> list[Message]:
        self.fetches += 1
        return [Message(data.decode(), data) for data in await self.answers.get()]

    async def close(self) -> None:
        self.released = await self._stop_reading(timeout=1.0)


async def test_a_take_that_times_out_leaves_the_poll_for_the_next_take() -> None:
    polls = _Polls()
    with pytest.raises(Timeout):
        await polls.next_message(timeout=0.05)
    polls.answers.put_nowait([b"1", b"2", b"3"])
    assert (await polls.next_message(timeout=1)).data == b"1"
    assert [m.data for m in await polls._take(10, 1)] == [b"2", b"3"]
    assert polls.fetches == 1, "one poll served every take"


async def test_close_waits_for_the_poll_in_flight_and_returns_what_nobody_took() -> None:
    polls = _Polls()
    polls.answers.put_nowait([b"1", b"2"])
    assert (await polls.next_message(timeout=1)).data == b"1"
    waiting = asyncio.ensure_future(polls.next_message())
    await asyncio.sleep(0)
    polls.answers.put_nowait([])  # "2" came from the buffer; this answers the next poll: empty
    assert (await waiting).data == b"2"
    taker = asyncio.ensure_future(polls.next_message())
    await asyncio.sleep(0.01)  # a poll is in flight
    closing = asyncio.ensure_future(polls.close())
    await asyncio.sleep(0.01)
    polls.answers.put_nowait([b"3", b"4"])  # it brings two while the close waits
    await closing
    with pytest.raises(ClosedError):
        await taker
    assert [m.data for m in polls.released] == [b"3", b"4"], "what the last poll brought is released"
    with pytest.raises(ClosedError):
        await polls.next_message(timeout=0.1)


async def test_a_poll_outliving_the_close_bound_is_cancelled() -> None:
    polls = _Polls()
    taker = asyncio.ensure_future(polls.next_message())
    await asyncio.sleep(0.01)
    read = polls._read
    assert read is not None
    released = await polls._stop_reading(timeout=0.05)
    assert released == []
    await asyncio.sleep(0)
    assert read.cancelled()
    with pytest.raises(ClosedError):
        await taker
