"""The group graph: a group's edges (what it reads, joins, looks up, writes) and goka's rules.

A group consumes co-partitioned *input* streams with callbacks, may keep a *group table*
(``persist``) stored in the compacted topic ``<group>-table``, may send messages to itself
through ``<group>-loop`` (``loop``), reads co-partitioned tables (``join``) and whole tables
(``lookup``), and emits to declared *output* streams. :func:`define_group` builds and validates
a :class:`GroupGraph`; every rule broken raises :class:`GraphError` naming the edge.

The suffixes ``-table`` and ``-loop`` can be changed process-wide (:func:`set_table_suffix`,
:func:`set_loop_suffix`, :func:`reset_suffixes`) or per graph (``define_group(...,
table_suffix=..., loop_suffix=...)``).
"""

from __future__ import annotations

import enum
import inspect
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NewType

from broker.backends.kafka.processor.codecs import resolve_codec
from broker.backends.kafka.processor.errors import GraphError
from broker.codecs import Codec

if TYPE_CHECKING:
    from broker.backends.kafka.processor.context import Context

__all__ = [
    "Callback",
    "Edge",
    "EdgeKind",
    "Group",
    "GroupGraph",
    "Stream",
    "Table",
    "define_group",
    "group_table",
    "input",
    "inputs",
    "join",
    "lookup",
    "loop",
    "loop_stream",
    "output",
    "persist",
    "reset_suffixes",
    "set_loop_suffix",
    "set_table_suffix",
    "visitor",
]

#: A consumer group name (also the prefix of the group's table and loop topics).
Group = NewType("Group", str)
#: A stream topic: an input or output of a group.
Stream = NewType("Stream", str)
#: A table topic: a group table, joined or looked up.
Table = NewType("Table", str)

#: A callback: ``callback(ctx, message)``, a plain function or a coroutine function.
Callback = Callable[["Context", Any], Awaitable[None] | None]

_DEFAULT_TABLE_SUFFIX = "-table"
_DEFAULT_LOOP_SUFFIX = "-loop"
_suffixes = {"table": _DEFAULT_TABLE_SUFFIX, "loop": _DEFAULT_LOOP_SUFFIX}


def set_table_suffix(suffix: str) -> None:
    """Change the group-table suffix for graphs defined from now on (default ``-table``)."""
    if not suffix:
        raise GraphError("the table suffix must not be empty")
    _suffixes["table"] = suffix


def set_loop_suffix(suffix: str) -> None:
    """Change the loop-topic suffix for graphs defined from now on (default ``-loop``)."""
    if not suffix:
        raise GraphError("the loop suffix must not be empty")
    _suffixes["loop"] = suffix


def reset_suffixes() -> None:
    """Back to ``-table`` and ``-loop``."""
    _suffixes["table"] = _DEFAULT_TABLE_SUFFIX
    _suffixes["loop"] = _DEFAULT_LOOP_SUFFIX


def group_table(group: str, suffix: str | None = None) -> Table:
    """The table topic of ``group``: ``<group>-table`` (or the configured suffix)."""
    return Table(group + (suffix if suffix is not None else _suffixes["table"]))


def loop_stream(group: str, suffix: str | None = None) -> Stream:
    """The loop topic of ``group``: ``<group>-loop`` (or the configured suffix)."""
    return Stream(group + (suffix if suffix is not None else _suffixes["loop"]))


class EdgeKind(enum.Enum):
    """What an edge means to the group."""

    INPUT = "input"
    LOOP = "loop"
    OUTPUT = "output"
    JOIN = "join"
    LOOKUP = "lookup"
    PERSIST = "persist"
    VISITOR = "visitor"


@dataclass(frozen=True, slots=True)
class Edge:
    """One edge of a group graph: a topic, its codec, and (inputs and loop) a callback.

    ``topic`` is empty for ``loop`` and ``persist`` edges until :func:`define_group` names them.
    """

    kind: EdgeKind
    topic: str
    codec: Codec[Any]
    callback: Callback | None = None
    is_async: bool = False

    def __repr__(self) -> str:
        name = self.topic or "<group>"
        return f"{self.kind.value}({name!r})"


def _callback(cb: Any, where: str) -> tuple[Callback, bool]:
    if not callable(cb):
        raise GraphError(f"{where}: the callback {cb!r} is not callable")
    return cb, inspect.iscoroutinefunction(cb) or inspect.iscoroutinefunction(type(cb).__call__)


def _topic(topic: str, where: str) -> str:
    if not isinstance(topic, str) or not topic:
        raise GraphError(f"{where}: a topic name must be a non-empty string, got {topic!r}")
    return topic


def input(topic: str, codec: Codec[Any] | str, callback: Callback) -> Edge:
    """Consume the co-partitioned stream ``topic``, decoding with ``codec``, calling ``callback``."""
    where = f"input({topic!r})"
    cb, is_async = _callback(callback, where)
    return Edge(EdgeKind.INPUT, _topic(topic, where), resolve_codec(codec, where), cb, is_async)


def inputs(topics: Iterable[str], codec: Codec[Any] | str, callback: Callback) -> tuple[Edge, ...]:
    """One ``input`` edge per topic of ``topics``, all with the same codec and callback."""
    names = list(topics) if not isinstance(topics, str) else [topics]
    if not names:
        raise GraphError("inputs(): no topics given")
    return tuple(input(name, codec, callback) for name in names)


def loop(codec: Codec[Any] | str, callback: Callback) -> Edge:
    """Consume ``<group>-loop``, written by ``ctx.loopback(key, value)``."""
    cb, is_async = _callback(callback, "loop()")
    return Edge(EdgeKind.LOOP, "", resolve_codec(codec, "loop()"), cb, is_async)


def output(topic: str, codec: Codec[Any] | str) -> Edge:
    """Declare ``topic`` as a stream the callbacks may ``ctx.emit`` to (not co-partitioned)."""
    where = f"output({topic!r})"
    return Edge(EdgeKind.OUTPUT, _topic(topic, where), resolve_codec(codec, where))


def join(table: str, codec: Codec[Any] | str) -> Edge:
    """Read the co-partitioned ``table`` with ``ctx.join(table)`` (the message key's row)."""
    where = f"join({table!r})"
    return Edge(EdgeKind.JOIN, _topic(table, where), resolve_codec(codec, where))


def lookup(table: str, codec: Codec[Any] | str) -> Edge:
    """Read any key of ``table`` with ``ctx.lookup(table, key)`` (the whole table is kept by a view)."""
    where = f"lookup({table!r})"
    return Edge(EdgeKind.LOOKUP, _topic(table, where), resolve_codec(codec, where))


def persist(codec: Codec[Any] | str) -> Edge:
    """Keep a group table in ``<group>-table``; ``ctx.value()``/``set_value()``/``delete()``."""
    return Edge(EdgeKind.PERSIST, "", resolve_codec(codec, "persist()"))


def visitor(name: str, callback: Callback) -> Edge:
    """A callback :meth:`Processor.visit_all(name, meta) <Processor.visit_all>` runs once per key
    of the group table (needs ``persist``): ``ctx.key``, ``ctx.value()``, ``ctx.set_value()`` as
    in an input callback, the message is ``meta``. Visits run between input batches, never beside
    a callback.
    """
    where = f"visitor({name!r})"
    cb, is_async = _callback(callback, where)
    if not isinstance(name, str) or not name:
        raise GraphError(f"{where}: a visitor name must be a non-empty string")
    return Edge(EdgeKind.VISITOR, name, resolve_codec("bytes", where), cb, is_async)


def _flatten(edges: Iterable[Edge | Sequence[Edge]]) -> list[Edge]:
    out: list[Edge] = []
    for item in edges:
        if isinstance(item, Edge):
            out.append(item)
        elif isinstance(item, Sequence) and not isinstance(item, str | bytes):
            out.extend(_flatten(item))
        else:
            raise GraphError(
                f"{item!r} is not an edge (use input, inputs, loop, output, join, lookup, persist, visitor)"
            )
    return out


class GroupGraph:
    """A validated group graph. Build it with :func:`define_group`."""

    def __init__(
        self, group: str, edges: Sequence[Edge], *, table_suffix: str | None, loop_suffix: str | None
    ) -> None:
        if not isinstance(group, str) or not group:
            raise GraphError(f"a group name must be a non-empty string, got {group!r}")
        self.group = Group(group)
        self.table_topic = group_table(group, table_suffix)
        self.loop_topic = loop_stream(group, loop_suffix)
        named: list[Edge] = []
        for edge in edges:
            if edge.kind is EdgeKind.LOOP:
                edge = Edge(edge.kind, self.loop_topic, edge.codec, edge.callback, edge.is_async)
            elif edge.kind is EdgeKind.PERSIST:
                edge = Edge(edge.kind, self.table_topic, edge.codec)
            named.append(edge)
        self.edges: tuple[Edge, ...] = tuple(named)
        self.validate()

    def __repr__(self) -> str:
        return f"GroupGraph({self.group!r}, {', '.join(repr(e) for e in self.edges)})"

    def _of(self, kind: EdgeKind) -> tuple[Edge, ...]:
        return tuple(e for e in self.edges if e.kind is kind)

    def _first(self, kind: EdgeKind) -> Edge | None:
        found = self._of(kind)
        return found[0] if found else None

    @property
    def input_streams(self) -> tuple[Edge, ...]:
        """The ``input`` edges."""
        return self._of(EdgeKind.INPUT)

    @property
    def output_streams(self) -> tuple[Edge, ...]:
        """The ``output`` edges."""
        return self._of(EdgeKind.OUTPUT)

    @property
    def joint_tables(self) -> tuple[Edge, ...]:
        """The ``join`` edges."""
        return self._of(EdgeKind.JOIN)

    @property
    def lookup_tables(self) -> tuple[Edge, ...]:
        """The ``lookup`` edges."""
        return self._of(EdgeKind.LOOKUP)

    @property
    def loop_edge(self) -> Edge | None:
        """The ``loop`` edge, if any."""
        return self._first(EdgeKind.LOOP)

    @property
    def visitors(self) -> tuple[Edge, ...]:
        """The ``visitor`` edges (their ``topic`` is the visitor's name)."""
        return self._of(EdgeKind.VISITOR)

    @property
    def table_edge(self) -> Edge | None:
        """The ``persist`` edge (the group table), if any."""
        return self._first(EdgeKind.PERSIST)

    @property
    def consumed_topics(self) -> tuple[str, ...]:
        """What the group's consumer subscribes to: the inputs and the loop topic."""
        loop_edge = self.loop_edge
        names = [e.topic for e in self.input_streams]
        return tuple([*names, loop_edge.topic] if loop_edge is not None else names)

    @property
    def copartitioned_topics(self) -> tuple[str, ...]:
        """Topics that must have the same partition count: inputs, loop, joins, group table."""
        names = list(self.consumed_topics) + [e.topic for e in self.joint_tables]
        if self.table_edge is not None:
            names.append(self.table_topic)
        return tuple(names)

    def validate(self) -> None:
        """Check goka's rules; :class:`GraphError` names the first one broken."""
        where = f"group {self.group!r}"
        if not self.input_streams:
            raise GraphError(f"{where} has no input stream: add at least one input(topic, codec, callback)")
        if len(self._of(EdgeKind.LOOP)) > 1:
            raise GraphError(f"{where} has more than one loop edge")
        if len(self._of(EdgeKind.PERSIST)) > 1:
            raise GraphError(f"{where} has more than one persist edge (one group table per group)")
        if self.visitors and self.table_edge is None:
            raise GraphError(f"{where}: a visitor visits the group table: add persist(codec)")
        names = [e.topic for e in self.visitors]
        if len(set(names)) != len(names):
            raise GraphError(f"{where}: two visitors are named alike ({sorted(names)})")
        own = {self.table_topic: "its group table", self.loop_topic: "its loop topic"}
        consumed: dict[str, Edge] = {}
        outputs: dict[str, Edge] = {}
        for edge in self.edges:
            if edge.kind in (EdgeKind.LOOP, EdgeKind.PERSIST, EdgeKind.VISITOR):
                continue
            if edge.topic in own:
                raise GraphError(
                    f"{where}: {edge!r} uses {own[edge.topic]} {edge.topic!r}; "
                    "use persist()/ctx.value() or loop()/ctx.loopback() instead"
                )
            seen = outputs if edge.kind is EdgeKind.OUTPUT else consumed
            previous = seen.get(edge.topic)
            if previous is not None:
                raise GraphError(f"{where}: topic {edge.topic!r} is used twice ({previous!r} and {edge!r})")
            seen[edge.topic] = edge

    def edge(self, kind: EdgeKind, topic: str) -> Edge | None:
        """The edge of ``kind`` for ``topic``, if declared."""
        for edge in self.edges:
            if edge.kind is kind and edge.topic == topic:
                return edge
        return None

    def codecs(self) -> dict[str, Codec[Any]]:
        """Every topic the graph names, with its codec."""
        return {e.topic: e.codec for e in self.edges}


def define_group(
    group: str,
    *edges: Edge | Sequence[Edge],
    table_suffix: str | None = None,
    loop_suffix: str | None = None,
) -> GroupGraph:
    """Build the graph of ``group`` from ``edges`` and validate it (:class:`GraphError` if invalid)."""
    return GroupGraph(group, _flatten(edges), table_suffix=table_suffix, loop_suffix=loop_suffix)
