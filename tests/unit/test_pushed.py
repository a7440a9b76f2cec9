"""The push-delivery iterator shells (broker.driver.pushed) over a scripted driver."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from broker.driver.pushed import PushedBatchedMessageIterator, PushedMessageIterator
from broker.errors import ClosedError, ConfigError, Timeout
from broker.message import Message


class ScriptedDriver:
    """A PushDriver whose deliveries the test pushes by hand (``push``); records its calls."""

    name = "'scripted'"

    def __init__(self, *, start_delay: float = 0.0, fail_starts: int = 0) -> None:
        self.deliver: Callable[[Any], None] | None = None
        self.starts = 0
        self.stops = 0
        self.start_delay = start_delay
        self.fail_starts = fail_starts
        self.stale_ids: set[int] = set()

    async def start(self, deliver: Callable[[Any], None]) -> None:
        self.starts += 1
        await asyncio.sleep(self.start_delay)
        if self.fail_starts:
            self.fail_starts -= 1
            raise ConnectionError("cannot subscribe yet")
        self.deliver = deliver

    def push(self, *ids: int) -> None:
        assert self.deliver is not None, "pushed before the subscription started"
        for i in ids:
            self.deliver(i)

    def stale(self, delivery: Any) -> bool:
        return delivery in self.stale_ids

    def message(self, delivery: Any, now: float) -> Message:
        return Message(str(delivery), b"%d" % delivery, ingestion_time=now)

    async def stop(self) -> None:
        self.stops += 1


async def test_starts_on_enter_or_first_read_once_and_hands_out_in_order() -> None:
    driver = ScriptedDriver()
    async with PushedMessageIterator(driver) as messages:
        assert driver.starts == 1
        driver.push(1, 2)
        assert [(await messages.next_message()).id, (await messages.next_message()).id] == ["1", "2"]
    lazy = ScriptedDriver()
    iterator = PushedMessageIterator(lazy)
    assert lazy.starts == 0
    with pytest.raises(Timeout):
        await iterator.next_message(timeout=0.01)
    assert lazy.starts == 1
    await iterator.close()


async def test_a_failed_start_is_tried_again_on_the_next_read() -> None:
    driver = ScriptedDriver(fail_starts=1)
    iterator = PushedMessageIterator(driver)
    with pytest.raises(ConnectionError):
        await iterator.next_message(timeout=0.01)
    with pytest.raises(Timeout):
        await iterator.next_message(timeout=0.01)
    assert driver.starts == 2
    await iterator.close()


async def test_stale_deliveries_are_skipped() -> None:
    driver = ScriptedDriver()
    async with PushedBatchedMessageIterator(driver, 10, 0.05) as batches:
        driver.stale_ids = {2, 4}
        driver.push(1, 2, 3, 4, 5)
        assert [m.id for m in await batches.next_batch()] == ["1", "3", "5"]
    driver = ScriptedDriver()
    async with PushedMessageIterator(driver) as messages:
        driver.stale_ids = {7}
        driver.push(7, 8)
        assert (await messages.next_message(timeout=1)).id == "8"


async def test_batches_take_what_is_ready_up_to_the_size_and_are_empty_after_the_timeout() -> None:
    driver = ScriptedDriver()
    async with PushedBatchedMessageIterator(driver, 3, 0.05) as batches:
        assert await batches.next_batch() == []
        driver.push(1, 2, 3, 4)
        assert [m.id for m in await batches.next_batch()] == ["1", "2", "3"]
        assert [m.id for m in await batches.next_batch()] == ["4"]
    for size, timeout in ((0, 1.0), (5, -1.0)):
        with pytest.raises(ConfigError):
            PushedBatchedMessageIterator(ScriptedDriver(), size, timeout)


async def test_close_wakes_every_waiter_stops_once_and_refuses_reads() -> None:
    driver = ScriptedDriver()
    iterator = PushedMessageIterator(driver)
    await iterator.__aenter__()
    waiters = [asyncio.ensure_future(iterator.next_message()) for _ in range(3)]
    await asyncio.sleep(0.01)
    await iterator.close()
    for waiter in waiters:
        with pytest.raises(ClosedError):
            await waiter
    await iterator.close()
    assert driver.stops == 1
    with pytest.raises(ClosedError):
        await iterator.next_message(timeout=0.1)
    with pytest.raises(ClosedError):
        await iterator.__aenter__()


async def test_close_during_the_start_waits_for_it_and_then_stops() -> None:
    driver = ScriptedDriver(start_delay=0.05)
    iterator = PushedBatchedMessageIterator(driver, 5, 1.0)
    reading = asyncio.ensure_future(iterator.next_batch())
    await asyncio.sleep(0.01)  # the start is in progress
    await iterator.close()
    assert driver.starts == 1 and driver.stops == 1
    with pytest.raises(ClosedError):
        await reading
