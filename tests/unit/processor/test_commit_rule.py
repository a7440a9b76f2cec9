"""The commit rule, deferred commits and nil handling, on a running processor (in-memory log)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import pytest

from broker.backends.kafka.processor import (
    CallbackFailed,
    Context,
    NilHandling,
    Processor,
    ProcessorError,
    ProcessorState,
    define_group,
    input,
    loop,
    output,
    persist,
)
from broker.errors import PublishError
from broker.log import TopicPartition
from broker.testing import wait_until
from tests.unit.processor.support import FlakyLog, as_log, committed_total, inmem_backend


@pytest.fixture
async def flaky() -> AsyncIterator[FlakyLog]:
    backend = inmem_backend()
    async with backend:
        log = FlakyLog(backend.log())
        await log.create_topic("in", 1)
        yield log


async def fill(log: FlakyLog, count: int, key: str = "k", topic: str = "in") -> None:
    for i in range(count):
        await log.produce(topic, str(i).encode(), key=key, partition=0)


def counting(calls: list[str], effect: Callable[[Context, str], None]) -> Callable[[Context, str], None]:
    def cb(ctx: Context, msg: str) -> None:
        calls.append(msg)
        effect(ctx, msg)

    return cb


async def committed(log: FlakyLog, group: str) -> int | None:
    return (await log.committed(group, [TopicPartition("in", 0)]))[TopicPartition("in", 0)]


async def test_offsets_are_committed_after_processing(flaky: FlakyLog) -> None:
    calls: list[str] = []
    graph = define_group(
        "ok", input("in", "str", counting(calls, lambda c, m: c.set_value(m))), persist("str")
    )
    await fill(flaky, 25)
    proc = Processor(as_log(flaky), graph, batch_size=7)
    async with proc:
        await wait_until(lambda: len(calls) == 25, 5)
        await wait_until(lambda: proc.state is ProcessorState.RUNNING, 5)
    assert await committed(flaky, "ok") == 25
    assert calls == [str(i) for i in range(25)]
    assert proc.state is ProcessorState.STOPPED and proc.error is None


@pytest.mark.parametrize(
    ("failing", "effect", "edges"),
    [
        ("out", lambda ctx, msg: ctx.emit("out", ctx.key, msg), [output("out", "str")]),
        ("fails-table", lambda ctx, msg: ctx.set_value(msg), [persist("str")]),
        ("fails-loop", lambda ctx, msg: ctx.loopback("other", msg), [loop("str", lambda ctx, msg: None)]),
    ],
    ids=["emit", "table write", "loopback"],
)
async def test_a_failed_side_effect_stops_the_processor_and_holds_the_commit(
    flaky: FlakyLog, failing: str, effect: Any, edges: list[Any]
) -> None:
    calls: list[str] = []
    graph = define_group("fails", input("in", "str", counting(calls, effect)), *edges)
    await fill(flaky, 10)
    flaky.fail_topics.add(failing)
    flaky.fail_after = 5  # the 6th write fails
    proc = Processor(as_log(flaky), graph, batch_size=1, commit_every=1)
    with pytest.raises(ProcessorError) as info:
        await proc.run()
    assert (
        isinstance(info.value.__cause__, PublishError)
        or isinstance(info.value, PublishError)
        or ("injected" in repr(info.value))
    )
    assert proc.state is ProcessorState.FAILED
    # checkpoint after every message: 0..4 were confirmed and committed; 5's write failed
    assert len(calls) == 6
    assert await committed(flaky, "fails") == 5
    # a restart processes message 5 again (at-least-once) and then the rest
    flaky.fail_topics.clear()
    again: list[str] = []
    restarted = define_group("fails", input("in", "str", counting(again, effect)), *edges)
    async with Processor(as_log(flaky), restarted):
        await wait_until(lambda: len(again) == 5, 5)
    assert again == ["5", "6", "7", "8", "9"]
    assert await committed(flaky, "fails") == 10


async def test_a_failure_commits_nothing_of_its_batch(flaky: FlakyLog) -> None:
    calls: list[str] = []
    graph = define_group(
        "batchfail",
        input("in", "str", counting(calls, lambda c, m: c.emit("out", c.key, m))),
        output("out", "str"),
    )
    await fill(flaky, 10)
    flaky.fail_topics.add("out")
    flaky.fail_after = 9  # only the last emit of the single batch fails
    with pytest.raises(ProcessorError):
        await Processor(as_log(flaky), graph, batch_size=100).run()
    assert len(calls) == 10
    assert await committed(flaky, "batchfail") is None


async def test_a_raising_callback_commits_what_came_before_only(flaky: FlakyLog) -> None:
    def effect(ctx: Context, msg: str) -> None:
        if msg == "3":
            raise RuntimeError("poison")

    calls: list[str] = []
    await fill(flaky, 6)
    with pytest.raises(CallbackFailed, match="poison"):
        await Processor(
            as_log(flaky),
            define_group("poison", input("in", "str", counting(calls, effect))),
            batch_size=1,
            commit_every=1,
        ).run()
    assert calls == ["0", "1", "2", "3"]
    assert await committed(flaky, "poison") == 3


async def test_deferred_commit_holds_the_offset_until_done(flaky: FlakyLog) -> None:
    pending: list[Callable[[BaseException | None], None]] = []
    calls: list[str] = []

    def effect(ctx: Context, msg: str) -> None:
        if msg == "2":
            pending.append(ctx.defer_commit())

    await fill(flaky, 5)
    proc = Processor(
        as_log(flaky),
        define_group("defer", input("in", "str", counting(calls, effect))),
        batch_size=1,
        commit_every=1,
    )
    proc.start()
    await wait_until(lambda: len(calls) == 5, 5)
    await proc._step(0.01)  # one more commit round
    assert await committed(flaky, "defer") == 2  # 0 and 1 committed; 2 held; 3 and 4 processed
    pending[0](None)
    await wait_until(lambda: proc._parts[0].committed.get(TopicPartition("in", 0)) == 5, 5)
    await proc.stop()
    assert await committed(flaky, "defer") == 5
    pending[0](RuntimeError("called twice is ignored"))
    assert proc.error is None


async def test_a_failed_deferred_commit_stops_the_processor(flaky: FlakyLog) -> None:
    pending: list[Callable[[BaseException | None], None]] = []
    await fill(flaky, 3)
    proc = Processor(
        as_log(flaky),
        define_group("deferfail", input("in", "str", lambda c, m: pending.append(c.defer_commit()))),
    )
    task = proc.start()
    await wait_until(lambda: len(pending) == 3, 5)
    pending[0](None)
    pending[1](RuntimeError("async work failed"))
    with pytest.raises(CallbackFailed, match="async work failed"):
        await task
    assert (await committed(flaky, "deferfail") or 0) <= 1  # only message 0 was done


class EmptyAware:
    def encode(self, value: str) -> bytes:
        return value.encode()

    def decode(self, data: bytes) -> str:
        return data.decode() or "EMPTY"


@pytest.mark.parametrize(
    ("mode", "expected"),
    [
        (NilHandling.IGNORE, ["a", "b"]),
        (NilHandling.PROCESS, ["a", None, "b"]),
        (NilHandling.DECODE, ["a", "EMPTY", "b"]),
    ],
)
async def test_nil_handling(flaky: FlakyLog, mode: NilHandling, expected: list[str | None]) -> None:
    got: list[str | None] = []
    await flaky.produce("in", b"a", key="k", partition=0)
    await flaky.produce("in", None, key="k", partition=0)
    await flaky.produce("in", b"b", key="k", partition=0)
    graph = define_group("nil", input("in", EmptyAware(), lambda ctx, msg: got.append(msg)))
    async with Processor(as_log(flaky), graph, nil_handling=mode):
        await wait_until(lambda: len(got) == len(expected), 5)
        await wait_until(lambda: True, 1)
    assert got == expected
    assert await committed(flaky, "nil") == 3


async def test_committed_total_helper(flaky: FlakyLog) -> None:
    assert await committed_total(as_log(flaky), "nobody", "in", 1) == 0


async def test_checkpoints_follow_commit_every_and_idle(flaky: FlakyLog) -> None:
    calls: list[str] = []
    await fill(flaky, 25)
    proc = Processor(
        as_log(flaky),
        define_group("cadence", input("in", "str", counting(calls, lambda c, m: None))),
        batch_size=5,
        commit_every=10,
        commit_interval=3600,
    )
    await proc._setup(manual=True)
    seen = []
    for _ in range(5):
        await proc._step(0)
        seen.append(await committed(flaky, "cadence"))
    assert seen == [None, 10, 10, 20, 20]  # a checkpoint after every 10 messages
    await proc._step(0)  # nothing left: an idle checkpoint commits the rest
    assert await committed(flaky, "cadence") == 25
    await proc._teardown()


async def test_a_graceful_stop_commits_everything_processed(flaky: FlakyLog) -> None:
    calls: list[str] = []
    await fill(flaky, 8)
    proc = Processor(
        as_log(flaky),
        define_group(
            "last", input("in", "str", counting(calls, lambda c, m: c.set_value(m))), persist("str")
        ),
        commit_every=1000,
        commit_interval=3600,
    )
    await proc._setup(manual=True)
    await proc._step(0)
    assert len(calls) == 8 and await committed(flaky, "last") is None
    proc._stopping = True
    await proc._teardown()
    assert await committed(flaky, "last") == 8
    assert proc.state is ProcessorState.STOPPED
    high = await flaky.watermarks(TopicPartition("last-table", 0))
    assert high == (0, 1)  # eight writes of one key, coalesced into one table record
