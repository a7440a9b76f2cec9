"""Group graphs: edges, topic names, suffixes and goka's validation rules."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from broker.backends.kafka.processor import (
    Context,
    EdgeKind,
    GraphError,
    Int64Codec,
    define_group,
    group_table,
    input,
    inputs,
    join,
    lookup,
    loop,
    loop_stream,
    output,
    persist,
    reset_suffixes,
    set_loop_suffix,
    set_table_suffix,
)
from broker.codecs import JsonCodec, StrCodec
from broker.errors import ConfigError, DecodeError, EncodeError


def cb(ctx: Context, msg: Any) -> None:
    pass


async def acb(ctx: Context, msg: Any) -> None:
    pass


@pytest.fixture(autouse=True)
def _suffixes() -> Iterator[None]:
    yield
    reset_suffixes()


def test_a_full_graph_names_its_topics_and_edges() -> None:
    graph = define_group(
        "g",
        input("a", "str", cb),
        inputs(["b", "c"], JsonCodec(), acb),
        loop("json", cb),
        output("out", "str"),
        join("users", "json"),
        lookup("prices", "int64"),
        persist("int64"),
    )
    assert graph.group == "g"
    assert graph.table_topic == "g-table" and graph.loop_topic == "g-loop"
    assert [e.topic for e in graph.input_streams] == ["a", "b", "c"]
    assert graph.consumed_topics == ("a", "b", "c", "g-loop")
    assert set(graph.copartitioned_topics) == {"a", "b", "c", "g-loop", "users", "g-table"}
    assert [e.topic for e in graph.output_streams] == ["out"]
    assert [e.topic for e in graph.joint_tables] == ["users"]
    assert [e.topic for e in graph.lookup_tables] == ["prices"]
    assert graph.loop_edge is not None and graph.loop_edge.topic == "g-loop"
    assert graph.table_edge is not None and isinstance(graph.table_edge.codec, Int64Codec)
    assert graph.edge(EdgeKind.INPUT, "b") is not None and graph.edge(EdgeKind.INPUT, "b").is_async  # type: ignore[union-attr]
    assert not graph.input_streams[0].is_async
    assert graph.codecs()["a"].__class__ is StrCodec
    assert "input('a')" in repr(graph)


def test_suffixes_are_configurable_globally_and_per_graph() -> None:
    assert group_table("x") == "x-table" and loop_stream("x") == "x-loop"
    set_table_suffix(".state")
    set_loop_suffix(".again")
    graph = define_group("x", input("in", "str", cb), loop("str", cb), persist("str"))
    assert (graph.table_topic, graph.loop_topic) == ("x.state", "x.again")
    reset_suffixes()
    assert group_table("x") == "x-table"
    custom = define_group("y", input("in", "str", cb), persist("str"), table_suffix="_t", loop_suffix="_l")
    assert (custom.table_topic, custom.loop_topic) == ("y_t", "y_l")
    with pytest.raises(GraphError):
        set_table_suffix("")
    with pytest.raises(GraphError):
        set_loop_suffix("")


@pytest.mark.parametrize(
    ("edges", "message"),
    [
        ((), "no input stream"),
        ((output("o", "str"), persist("str")), "no input stream"),
        ((input("a", "str", cb), loop("str", cb), loop("str", cb)), "more than one loop"),
        ((input("a", "str", cb), persist("str"), persist("str")), "more than one persist"),
        ((input("a", "str", cb), input("a", "str", cb)), "used twice"),
        ((input("a", "str", cb), join("a", "str")), "used twice"),
        ((input("a", "str", cb), lookup("t", "str"), join("t", "str")), "used twice"),
        ((input("a", "str", cb), output("o", "str"), output("o", "str")), "used twice"),
        ((input("g-table", "str", cb),), "group table"),
        ((input("a", "str", cb), output("g-loop", "str")), "loop topic"),
        ((input("a", "str", cb), join("g-table", "str")), "group table"),
        ((input("a", "str", cb), lookup("g-table", "str")), "group table"),
    ],
)
def test_validation_rules(edges: tuple[Any, ...], message: str) -> None:
    with pytest.raises(GraphError, match=message):
        define_group("g", *edges)


def test_an_output_may_feed_an_input_of_the_same_group() -> None:
    graph = define_group("g", input("a", "str", cb), output("a", "str"))
    assert graph.edge(EdgeKind.OUTPUT, "a") is not None


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: define_group("", input("a", "str", cb)), "group name"),
        (lambda: input("", "str", cb), "non-empty"),
        (lambda: input("a", "str", "not callable"), "not callable"),  # type: ignore[arg-type]
        (lambda: loop("str", None), "not callable"),  # type: ignore[arg-type]
        (lambda: input("a", "yaml", cb), "unknown codec"),
        (lambda: output("o", object()), "is not a codec"),  # type: ignore[arg-type]
        (lambda: inputs([], "str", cb), "no topics"),
        (lambda: define_group("g", input("a", "str", cb), "not an edge"), "not an edge"),  # type: ignore[arg-type]
    ],
)
def test_bad_edges_are_refused_with_a_clear_error(make: Any, message: str) -> None:
    with pytest.raises(GraphError, match=message):
        make()


def test_graph_errors_are_config_errors() -> None:
    assert issubclass(GraphError, ConfigError)


def test_int64_codec_is_decimal_text() -> None:
    codec = Int64Codec()
    assert codec.encode(42) == b"42" and codec.encode(-7) == b"-7"
    assert codec.decode(b"42") == 42
    with pytest.raises(EncodeError):
        codec.encode("42")  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        codec.encode(True)
    with pytest.raises(EncodeError):
        codec.encode(2**63)
    with pytest.raises(DecodeError):
        codec.decode(b"forty-two")


def test_callable_objects_with_async_call_are_async() -> None:
    class Handler:
        async def __call__(self, ctx: Context, msg: Any) -> None:
            pass

    graph = define_group("g", input("a", "str", Handler()))
    assert graph.input_streams[0].is_async
