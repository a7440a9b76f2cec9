"""iterator -> batched iterator: lib-brokers' exact semantics."""

from __future__ import annotations

import asyncio
import time

import pytest

from broker import adapt
from broker.errors import ClosedError, ReceiveError
from tests.unit.scripted import ScriptedIterator


async def test_full_batch_returns_as_soon_as_it_is_full() -> None:
    source = ScriptedIterator()
    source.feed(*range(5))
    batches = adapt.batched_messages(source, batch_size=3, timeout=10)
    started = time.monotonic()
    batch = await batches.next_batch()
    assert [m.id for m in batch] == ["0", "1", "2"]
    assert time.monotonic() - started < 1


async def test_timeout_returns_the_partial_batch_possibly_empty() -> None:
    source = ScriptedIterator()
    source.feed(1, 2)
    batches = adapt.batched_messages(source, batch_size=10, timeout=0.2)
    assert [m.id for m in await batches.next_batch()] == ["1", "2"]
    assert await batches.next_batch() == []


async def test_per_call_timeout_overrides_the_window() -> None:
    source = ScriptedIterator()
    batches = adapt.batched_messages(source, batch_size=10, timeout=60)
    started = time.monotonic()
    assert await batches.next_batch(timeout=0.1) == []
    assert time.monotonic() - started < 1


async def test_error_after_a_partial_batch_returns_the_batch_then_raises() -> None:
    source = ScriptedIterator()
    source.feed(1, ReceiveError("broker went away"))
    batches = adapt.batched_messages(source, batch_size=10, timeout=5)
    assert [m.id for m in await batches.next_batch()] == ["1"]
    with pytest.raises(ReceiveError, match="went away"):
        await batches.next_batch()


async def test_error_with_nothing_in_hand_is_raised_at_once() -> None:
    source = ScriptedIterator()
    source.feed(ReceiveError("boom"))
    batches = adapt.batched_messages(source, batch_size=10, timeout=5)
    with pytest.raises(ReceiveError):
        await batches.next_batch()


async def test_cancel_nacks_what_the_batch_had_taken() -> None:
    source = ScriptedIterator()
    source.feed(1, 2)
    batches = adapt.batched_messages(source, batch_size=10, timeout=60)
    task = asyncio.ensure_future(batches.next_batch())
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert sorted(m for m, _ in source.acker.nacked) == ["1", "2"]


async def test_closed_source_ends_async_for_after_the_last_partial_batch() -> None:
    source = ScriptedIterator()
    source.feed(1, 2, 3, None)
    batches = adapt.batched_messages(source, batch_size=2, timeout=5)
    seen = [[m.id for m in batch] async for batch in batches]
    assert seen == [["1", "2"], ["3"]]
    with pytest.raises(ClosedError):
        await batches.next_batch()


async def test_close_closes_the_source() -> None:
    source = ScriptedIterator()
    async with adapt.batched_messages(source, batch_size=2, timeout=1):
        pass
    assert source.closed


def test_bad_arguments_are_rejected() -> None:
    with pytest.raises(ValueError):
        adapt.batched_messages(ScriptedIterator(), batch_size=0)
    with pytest.raises(ValueError):
        adapt.batched_messages(ScriptedIterator(), batch_size=1, timeout=-1)
