"""Every context call, through the Tester (real processors on the in-memory log, stepped)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from broker.backends.kafka.processor import (
    CallbackFailed,
    Context,
    ContextError,
    ProcessorError,
    Tester,
    define_group,
    input,
    join,
    lookup,
    loop,
    output,
    persist,
)
from broker.codecs import JsonCodec


@pytest.fixture
async def tester() -> AsyncIterator[Tester]:
    async with Tester(partitions=2) as t:
        yield t


async def test_message_fields(tester: Tester) -> None:
    seen: list[dict[str, Any]] = []

    def cb(ctx: Context, msg: Any) -> None:
        seen.append(
            {
                "topic": ctx.topic,
                "key": ctx.key,
                "partition": ctx.partition,
                "offset": ctx.offset,
                "timestamp": ctx.timestamp,
                "headers": dict(ctx.headers),
                "group": ctx.group,
                "msg": msg,
                "record": ctx.record.value,
            }
        )

    await tester.processor(define_group("fields", input("in", "json", cb)))
    before = time.time()
    await tester.consume("in", "k", {"a": 1}, headers={"h": "v"})
    await tester.consume("in", "k", {"a": 2})
    assert [s["offset"] for s in seen] == [0, 1]
    first = seen[0]
    assert first["topic"] == "in" and first["key"] == "k" and first["group"] == "fields"
    assert first["headers"] == {"h": "v"} and seen[1]["headers"] == {}
    assert first["msg"] == {"a": 1} and first["record"] == b'{"a":1}'
    assert first["partition"] in (0, 1)
    assert first["timestamp"] is not None and first["timestamp"] >= before - 1


async def test_value_set_value_and_delete(tester: Tester) -> None:
    def cb(ctx: Context, msg: str) -> None:
        if msg == "del":
            ctx.delete()
            assert ctx.value() is None
            return
        ctx.set_value((ctx.value() or 0) + int(msg))
        assert ctx.value() >= int(msg)

    await tester.processor(define_group("sum", input("in", "str", cb), persist("int64")))
    await tester.consume("in", "a", "2")
    await tester.consume("in", "a", "3")
    await tester.consume("in", "b", "1")
    assert tester.table_value("sum-table", "a") == 5
    assert tester.table_keys("sum-table") == ["a", "b"]
    await tester.consume("in", "a", "del")
    assert tester.table_value("sum-table", "a") is None
    assert tester.table_keys("sum-table") == ["b"]
    # the table topic holds the writes: the last value per key, a tombstone for the delete
    tracker = await tester.tracker("sum-table")
    assert await tracker.next() is None
    await tester.consume("in", "b", "4")
    assert await tracker.next() == ("b", 5)


async def test_emit_reaches_declared_outputs_with_headers(tester: Tester) -> None:
    def cb(ctx: Context, msg: str) -> None:
        ctx.emit("out", ctx.key, msg.upper(), headers={"x": "1"})
        ctx.emit("out", "gone", None)

    await tester.processor(
        define_group("emitter", input("in", "str", cb), output("out", "str")), headers={"app": "t", "x": "0"}
    )
    tracker = await tester.tracker("out")
    await tester.consume("in", "k", "hello")
    first = await tracker.next_record()
    assert first is not None and first.value == b"HELLO" and first.key == "k"
    assert dict(first.attributes) == {"app": "t", "x": "1"}
    second = await tracker.next_record()
    assert second is not None and second.value is None and second.key == "gone"
    assert dict(second.attributes) == {"app": "t", "x": "0"}
    assert await tracker.next() is None


async def test_loopback_is_processed_before_consume_returns(tester: Tester) -> None:
    order: list[str] = []

    def cb(ctx: Context, msg: str) -> None:
        order.append(f"in:{ctx.key}")
        for target in msg.split(","):
            ctx.loopback(target, {"from": ctx.key})

    def looped(ctx: Context, msg: dict[str, str]) -> None:
        order.append(f"loop:{ctx.key}<-{msg['from']}")
        ctx.set_value((ctx.value() or 0) + 1)

    await tester.processor(
        define_group("fan", input("in", "str", cb), loop(JsonCodec(), looped), persist("int64"))
    )
    await tester.consume("in", "src", "x,y,x")
    assert order[0] == "in:src" and sorted(order[1:]) == ["loop:x<-src", "loop:x<-src", "loop:y<-src"]
    assert tester.table_value("fan-table", "x") == 2
    assert tester.table_value("fan-table", "y") == 1


async def test_join_reads_the_copartitioned_table(tester: Tester) -> None:
    got: list[Any] = []
    await tester.processor(
        define_group(
            "joiner",
            input("in", "str", lambda ctx, msg: got.append(ctx.join("users"))),
            join("users", "json"),
        )
    )
    await tester.set_table_value("users", "alice", {"name": "Alice"})
    await tester.consume("in", "alice", "x")
    await tester.consume("in", "bob", "x")
    assert got == [{"name": "Alice"}, None]
    assert tester.table_value("users", "alice") == {"name": "Alice"}
    await tester.set_table_value("users", "alice", {"name": "Alicia"})
    await tester.consume("in", "alice", "x")
    assert got[-1] == {"name": "Alicia"}


async def test_lookup_reads_any_key_of_a_table(tester: Tester) -> None:
    got: list[Any] = []
    await tester.processor(
        define_group(
            "looker",
            input("in", "str", lambda ctx, msg: got.append(ctx.lookup("prices", msg))),
            lookup("prices", "int64"),
        )
    )
    await tester.set_table_value("prices", "apple", 3)
    await tester.set_table_value("prices", "pear", 5)
    await tester.consume("in", "k1", "pear")
    await tester.consume("in", "k2", "apple")
    await tester.consume("in", "k3", "plum")
    assert got == [5, 3, None]
    assert tester.table_value("prices", "pear") == 5


async def test_a_chain_of_processors_settles_in_one_consume(tester: Tester) -> None:
    await tester.processor(
        define_group(
            "first", input("a", "str", lambda ctx, msg: ctx.emit("b", ctx.key, msg + "!")), output("b", "str")
        )
    )

    def count(ctx: Context, msg: str) -> None:
        ctx.set_value(msg)

    await tester.processor(define_group("second", input("b", "str", count), persist("str")))
    await tester.consume("a", "k", "hi")
    assert tester.table_value("second-table", "k") == "hi!"


async def test_async_callbacks_are_awaited(tester: Tester) -> None:
    async def cb(ctx: Context, msg: str) -> None:
        ctx.set_value(msg)

    await tester.processor(define_group("asyncy", input("in", "str", cb), persist("str")))
    await tester.consume("in", "k", "v")
    assert tester.table_value("asyncy-table", "k") == "v"


async def test_fail_stops_the_processor_and_commits_nothing(tester: Tester) -> None:
    def cb(ctx: Context, msg: str) -> None:
        ctx.set_value("written")
        if msg == "bad":
            ctx.fail(ValueError("bad input"))

    proc = await tester.processor(define_group("failing", input("in", "str", cb), persist("str")))
    await tester.consume("in", "a", "good")
    with pytest.raises(CallbackFailed, match="bad input") as info:
        await tester.consume("in", "a", "bad")
    assert isinstance(info.value.__cause__, ValueError)
    assert proc.error is info.value and proc.state.value == "failed"
    committed = await tester.log.committed("failing", [ctx_tp for ctx_tp in _tps("in", 2)])
    assert sorted(v for v in committed.values() if v is not None) == [1]


def _tps(topic: str, count: int) -> list[Any]:
    from broker.log import TopicPartition

    return [TopicPartition(topic, p) for p in range(count)]


async def test_a_raising_callback_stops_the_processor(tester: Tester) -> None:
    def cb(ctx: Context, msg: str) -> None:
        raise RuntimeError("boom")

    await tester.processor(define_group("raiser", input("in", "str", cb)))
    with pytest.raises(CallbackFailed, match="boom"):
        await tester.consume("in", "a", "x")


async def test_fail_with_a_message(tester: Tester) -> None:
    await tester.processor(define_group("failmsg", input("in", "str", lambda ctx, msg: ctx.fail("nope"))))
    with pytest.raises(CallbackFailed, match="nope"):
        await tester.consume("in", "a", "x")


def _misuse_cases() -> list[tuple[str, Any, list[Any], str]]:
    return [
        ("value without persist", lambda ctx, msg: ctx.value(), [], "no persist"),
        ("set_value without persist", lambda ctx, msg: ctx.set_value(1), [], "no persist"),
        ("delete without persist", lambda ctx, msg: ctx.delete(), [], "no persist"),
        ("set_value(None)", lambda ctx, msg: ctx.set_value(None), [persist("int64")], "delete"),
        ("bad table codec", lambda ctx, msg: ctx.set_value("text"), [persist("int64")], "cannot encode"),
        ("emit undeclared", lambda ctx, msg: ctx.emit("nowhere", "k", "v"), [], "no output"),
        ("emit to table", lambda ctx, msg: ctx.emit("m-table", "k", "v"), [persist("str")], "set_value"),
        ("emit to loop", lambda ctx, msg: ctx.emit("m-loop", "k", "v"), [loop("str", print)], "loopback"),
        ("emit bad codec", lambda ctx, msg: ctx.emit("o", "k", 42), [output("o", "str")], "cannot encode"),
        ("loopback without loop", lambda ctx, msg: ctx.loopback("k", "v"), [], "no loop"),
        ("loopback bad codec", lambda ctx, msg: ctx.loopback("k", 1), [loop("str", print)], "cannot encode"),
        ("join undeclared", lambda ctx, msg: ctx.join("users"), [], "no join"),
        ("lookup undeclared", lambda ctx, msg: ctx.lookup("users", "k"), [], "no lookup"),
    ]


@pytest.mark.parametrize(
    ("name", "cb", "edges", "message"), _misuse_cases(), ids=[c[0] for c in _misuse_cases()]
)
async def test_misuse_stops_the_processor_naming_the_mistake(
    tester: Tester, name: str, cb: Any, edges: list[Any], message: str
) -> None:
    proc = await tester.processor(define_group("m", input("in", "str", cb), *edges))
    with pytest.raises(ContextError, match=message) as info:
        await tester.consume("in", "k", "x")
    assert "m" in str(info.value) and "in[" in str(info.value)
    assert proc.state.value == "failed"


async def test_misuse_stops_the_processor_even_when_the_callback_catches_it(tester: Tester) -> None:
    def cb(ctx: Context, msg: str) -> None:
        try:
            ctx.emit("undeclared", "k", "v")
        except ContextError:
            pass

    await tester.processor(define_group("catcher", input("in", "str", cb)))
    with pytest.raises(ContextError, match="undeclared"):
        await tester.consume("in", "k", "x")


async def test_table_calls_need_a_key(tester: Tester) -> None:
    await tester.processor(
        define_group("keyless", input("in", "str", lambda ctx, msg: ctx.value()), persist("str"))
    )
    with pytest.raises(ContextError, match="no"):
        await tester.consume("in", None, "x")


async def test_undecodable_input_stops_the_processor(tester: Tester) -> None:
    await tester.processor(define_group("decoder", input("in", "json", lambda ctx, msg: None)))
    with pytest.raises(ProcessorError, match="cannot decode"):
        await tester.consume("in", "k", b"{not json", codec="bytes")
