"""iterators and receivers -> streams; stream -> batched stream."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

import pytest

from broker import adapt
from broker.errors import ReceiveError
from broker.message import Message
from tests.unit.scripted import ScriptedIterator


async def test_message_stream_yields_everything_and_ends_when_the_source_closes() -> None:
    source = ScriptedIterator()
    source.feed(*range(20), None)
    async with adapt.message_stream(source) as stream:
        assert [m.id async for m in stream] == [str(i) for i in range(20)]


async def test_stream_prefetches_the_next_item_while_the_consumer_works() -> None:
    source = ScriptedIterator()
    source.feed(*range(5))
    stream = adapt.message_stream(source, buffer=10)
    first = await stream.__anext__()
    await asyncio.sleep(0.05)
    assert first.id == "0"
    assert source.pulls >= 5  # "double buffering": pulls went on without waiting for us
    await stream.aclose()


async def test_a_broker_error_is_raised_from_the_iteration_once() -> None:
    source = ScriptedIterator()
    source.feed(1, ReceiveError("lost connection"))
    stream = adapt.message_stream(source)
    assert (await stream.__anext__()).id == "1"
    with pytest.raises(ReceiveError):
        await stream.__anext__()
    with pytest.raises(StopAsyncIteration):
        await stream.__anext__()


async def test_aclose_nacks_messages_taken_but_not_handed_out() -> None:
    source = ScriptedIterator()
    source.feed(*range(5))
    stream = adapt.message_stream(source, buffer=10)
    first = await stream.__anext__()
    await asyncio.sleep(0.05)
    await stream.aclose()
    nacked = sorted(m for m, _ in source.acker.nacked)
    assert first.id not in nacked
    assert nacked == ["1", "2", "3", "4"]


async def test_batches_from_a_batched_iterator_skip_empty_batches() -> None:
    class Batches:
        def __init__(self) -> None:
            self.script: list[list[Message]] = [
                [],
                [Message("a", b"")],
                [],
                [Message("b", b""), Message("c", b"")],
            ]

        async def next_batch(self, timeout: float | None = None) -> list[Message]:
            if not self.script:
                from broker.errors import ClosedError

                raise ClosedError("done")
            return self.script.pop(0)

    stream = adapt.batched_message_stream(Batches())  # type: ignore[arg-type]
    assert [[m.id for m in b] async for b in stream] == [["a"], ["b", "c"]]
    flat = adapt.message_stream_from_batches(Batches())  # type: ignore[arg-type]
    assert [m.id async for m in flat] == ["a", "b", "c"]


async def _trickle(items: list[int], gap: float) -> AsyncIterator[int]:
    for item in items:
        await asyncio.sleep(gap)
        yield item


async def test_batch_stream_emits_full_batches() -> None:
    batches = adapt.batch_stream(_trickle(list(range(7)), 0), batch_size=3, timeout=5)
    assert [b async for b in batches] == [[0, 1, 2], [3, 4, 5], [6]]


async def test_batch_stream_window_is_bounded_under_a_steady_trickle() -> None:
    """A fixed window from the first item: a trickle faster than the timeout still flushes."""
    started = time.monotonic()
    batches = adapt.batch_stream(_trickle(list(range(12)), 0.05), batch_size=100, timeout=0.2)
    first = await batches.__anext__()
    assert 0.15 < time.monotonic() - started < 0.6
    assert 2 <= len(first) <= 5
    rest = [b async for b in batches]
    assert first + [i for b in rest for i in b] == list(range(12))


async def test_stream_from_receiver_streams_what_the_receiver_gets() -> None:
    source = ScriptedIterator()
    source.feed(*range(3))
    receiver = adapt.receiver(source)
    stream = adapt.stream_from_receiver(receiver)
    got = [await stream.__anext__() for _ in range(3)]
    assert [m.id for m in got] == ["0", "1", "2"]
    await stream.aclose()


async def test_record_streams() -> None:
    from broker.message import Record

    class Records:
        def __init__(self) -> None:
            self.left = 3

        async def next_record(self, timeout: float | None = None) -> Record:
            if not self.left:
                from broker.errors import ClosedError

                raise ClosedError("done")
            self.left -= 1
            return Record("t", 0, 2 - self.left, b"v")

    assert [r.offset async for r in adapt.record_stream(Records())] == [0, 1, 2]  # type: ignore[arg-type]
