"""iterators -> receivers with N workers; fan-in."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable

import pytest

from broker import adapt
from broker.errors import ReceiveError
from broker.message import Message
from tests.unit.scripted import ScriptedIterator


async def test_handlers_run_concurrently_up_to_the_limit() -> None:
    source = ScriptedIterator()
    source.feed(*range(12))
    running = 0
    peak = 0
    done: list[str] = []
    finished = asyncio.Event()

    async def handler(message: Message) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.02)
        running -= 1
        done.append(message.id)
        await message.ack()
        if len(done) == 12:
            finished.set()

    task = asyncio.ensure_future(adapt.receiver(source, concurrency=4).receive(handler))
    async with asyncio.timeout(5):
        await finished.wait()
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert peak == 4
    assert sorted(source.acker.acked, key=int) == [str(i) for i in range(12)]


async def test_one_at_a_time_takes_a_message_only_when_the_handler_is_free_and_needs_no_task_switch() -> None:
    """concurrency=1: while the handler holds a message nothing more is taken from the source (its
    ack deadline does not run in the receiver), and buffered messages are handled back to back,
    with no other task running in between (their settlements leave together)."""
    source = ScriptedIterator()
    source.feed(*range(20))
    release = asyncio.Event()
    order: list[str] = []

    async def handler(message: Message) -> None:
        if message.id == "0":
            await release.wait()
        order.append(message.id)
        await message.ack()

    task = asyncio.ensure_future(adapt.receiver(source).receive(handler))
    await asyncio.sleep(0.05)
    assert source.pulls == 1  # message 0 is in the handler; 1..19 stay in the source
    release.set()
    others: list[int] = []  # how many messages were handled each time another task ran
    while len(order) < 20:
        others.append(len(order))
        await asyncio.sleep(0)
    assert len(set(others)) <= 3, others  # 19 messages in a pass or two, not one per task switch
    assert order == [str(i) for i in range(20)] and source.acker.acked == order
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task


async def test_one_at_a_time_stop_drains_the_running_handler_and_takes_nothing_more() -> None:
    source = ScriptedIterator()
    source.feed(*range(5))
    started = asyncio.Event()
    finish = asyncio.Event()

    async def handler(message: Message) -> None:
        started.set()
        await finish.wait()
        await message.ack()

    receiver = adapt.receiver(source, drain_timeout=30)
    task = asyncio.ensure_future(receiver.receive(handler))
    await started.wait()
    receiver.stop()
    await asyncio.sleep(0.05)
    assert not task.done()  # the handler is still draining
    finish.set()
    async with asyncio.timeout(5):
        await task
    assert source.acker.acked == ["0"] and source.acker.nacked == []
    assert source.pulls == 1  # 1..4 were never taken: they stay for the next consumer


async def test_a_failing_handler_nacks_and_the_receiver_keeps_going() -> None:
    source = ScriptedIterator()
    source.feed(1, 2, 3, None)

    async def handler(message: Message) -> None:
        if message.id == "2":
            raise ValueError("bad payload")
        await message.ack()

    await adapt.receiver(source, nack_delay=5.0).receive(handler)  # returns when the source closes
    assert source.acker.acked == ["1", "3"]
    assert source.acker.nacked == [("2", 5.0)]


class _SlottedHandler:
    """A callable object no weak reference can be made to, and that cannot be hashed."""

    __slots__ = ("handled",)
    __hash__ = None  # type: ignore[assignment]

    def __init__(self) -> None:
        self.handled: list[str] = []

    async def __call__(self, message: Message) -> None:
        if message.id == "2":
            raise ValueError("bad payload")
        self.handled.append(message.id)
        await message.ack()


async def test_a_callable_object_without_weak_references_or_hash_is_a_handler_like_any_other() -> None:
    source = ScriptedIterator()
    source.feed(1, 2, 3, None)
    handler = _SlottedHandler()
    await adapt.receiver(source, nack_delay=5.0).receive(handler)
    assert handler.handled == ["1", "3"]
    assert source.acker.nacked == [("2", 5.0)]


async def test_a_handler_registered_to_apply_the_failure_rule_runs_in_place_of_the_receivers_own() -> None:
    """A registered handler is replaced by what its ``with_failure_rule(failed)`` returns; ``failed``
    nacks by the receiver's ``nack_delay``; a wrapper of the handler is not mistaken for it."""
    from broker.adapt.receivers import register_failure_rule

    built: list[str] = []

    async def settles(message: Message) -> None:
        raise AssertionError("the registered handler itself is not called")

    Call = Callable[[Message], Awaitable[None]]

    def with_failure_rule(failed: Call) -> Call:
        built.append("built")

        async def call(message: Message) -> None:
            try:
                if message.id == "2":
                    raise ValueError("bad payload")
                await message.ack()
            except Exception:
                await failed(message)

        return call

    register_failure_rule(settles, with_failure_rule)
    source = ScriptedIterator()
    source.feed(1, 2, 3, None)
    await adapt.receiver(source, nack_delay=5.0).receive(settles)
    assert built == ["built"]
    assert source.acker.acked == ["1", "3"]
    assert source.acker.nacked == [("2", 5.0)]

    async def wrapper(message: Message) -> None:  # carries the registered handler's __dict__
        await message.ack()

    functools.update_wrapper(wrapper, settles)
    source = ScriptedIterator()
    source.feed(4, None)
    await adapt.receiver(source).receive(wrapper)
    assert built == ["built"] and source.acker.acked == ["4"]


async def test_cancel_nacks_in_flight_and_queued_messages() -> None:
    source = ScriptedIterator()
    source.feed(*range(4))
    started = asyncio.Event()

    async def handler(message: Message) -> None:
        started.set()
        await asyncio.sleep(3600)

    task = asyncio.ensure_future(adapt.receiver(source, concurrency=2).receive(handler))
    await started.wait()
    await asyncio.sleep(0.05)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    nacked = sorted(m for m, _ in source.acker.nacked)
    # two in handlers, one queued, one held by the feeder: none handled, all nacked
    assert nacked == ["0", "1", "2", "3"]
    assert source.acker.acked == []


async def test_cancel_returns_when_a_handler_loses_the_cancellation() -> None:
    """A handler whose await loses the CancelledError returns normally; the cancelled receive()
    still returns. Python 3.11's ``asyncio.wait_for``, with which the azure-servicebus SDK waits
    for a settlement's answer, returns the answer and drops the cancel when both arrive together:
    the worker then went back to its queue and receive() never returned."""
    source = ScriptedIterator()
    source.feed(*range(3))
    settling = asyncio.Event()

    async def handler(message: Message) -> None:
        if message.id == "0":
            settling.set()
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                pass  # lost on the way, as wait_for loses it
        await message.ack()

    task = asyncio.ensure_future(adapt.receiver(source, concurrency=2).receive(handler))
    await settling.wait()
    await asyncio.sleep(0.05)
    task.cancel()
    done, _ = await asyncio.wait({task}, timeout=5)
    assert task in done, "the cancelled receive() did not return"
    assert task.cancelled()
    settled = sorted([*source.acker.acked, *(m for m, _ in source.acker.nacked)])
    assert settled == ["0", "1", "2"]  # each taken message settled once: none lost


async def test_a_source_error_stops_the_receiver_and_is_raised() -> None:
    source = ScriptedIterator()
    source.feed(1, ReceiveError("broker gone"))
    handled: list[str] = []

    async def handler(message: Message) -> None:
        handled.append(message.id)
        await message.ack()

    with pytest.raises(ReceiveError, match="broker gone"):
        await asyncio.wait_for(adapt.receiver(source, concurrency=3).receive(handler), 5)
    assert handled == ["1"]


async def test_receiver_from_batches_hands_out_single_messages() -> None:
    source = ScriptedIterator()
    source.feed(*range(6), None)
    got: list[str] = []

    async def handler(message: Message) -> None:
        got.append(message.id)
        await message.ack()

    await adapt.receiver_from_batches(source, concurrency=2).receive(handler)  # type: ignore[arg-type]
    assert sorted(got) == [str(i) for i in range(6)]


async def test_batched_receiver_hands_out_whole_batches_and_nacks_failed_ones() -> None:
    source = ScriptedIterator()
    source.feed(*range(4), None)
    seen: list[list[str]] = []

    async def handler(batch: list[Message]) -> None:
        seen.append([m.id for m in batch])
        await batch[0].ack()
        raise RuntimeError("half done")

    await adapt.batched_receiver(source).receive_batch(handler)  # type: ignore[arg-type]
    assert [i for b in seen for i in b] == ["0", "1", "2", "3"]
    first_of_each = {b[0] for b in seen}
    assert set(source.acker.acked) == first_of_each
    assert {m for m, _ in source.acker.nacked} == {"0", "1", "2", "3"} - first_of_each


async def test_fan_in_runs_all_and_the_first_error_stops_the_rest() -> None:
    healthy = ScriptedIterator()
    broken = ScriptedIterator()
    healthy.feed(1)
    received: list[str] = []

    async def handler(message: Message) -> None:
        received.append(message.id)
        await message.ack()
        broken.feed(ReceiveError("second receiver failed"))

    combined = adapt.fan_in(adapt.receiver(healthy), adapt.receiver(broken))
    with pytest.raises(ReceiveError):
        await asyncio.wait_for(combined.receive(handler), 5)
    assert received == ["1"]
    with pytest.raises(ValueError):
        adapt.fan_in()


async def test_bad_concurrency_is_rejected() -> None:
    async def handler(message: Message) -> None:
        pass

    with pytest.raises(ValueError):
        await adapt.receiver(ScriptedIterator(), concurrency=0).receive(handler)
