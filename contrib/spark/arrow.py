"""The rows the ``broker`` source yields, built column by column as Arrow record batches.

Every backend reads into one schema (:data:`READ_SCHEMA`), so a query does not change with the
broker: ``key`` (binary), ``value`` (binary), ``topic``, ``partition``, ``offset`` (Kafka offset,
JetStream stream sequence, Pulsar packed message id, or the journal sequence of an
acknowledging source), ``timestamp`` (publish time), ``attributes`` (headers / properties:
string names, binary values) and ``id`` (the broker's message id where messages have one:
Pub/Sub, Service Bus; null for logs, whose records are identified by ``topic``, ``partition``
and ``offset``).

Keys and attribute values are binary, as in Spark's own Kafka source: the source does not decode
text it cannot know is text. Kafka's key and header bytes go to Spark as they are on the wire;
elsewhere a key or attribute value the library reads as ``str`` becomes its UTF-8 bytes, with the
bytes the library kept as surrogate escapes restored (``encode("utf-8", "surrogateescape")``), so
a record gives the same bytes through Spark as through the library. A null header value reads as
empty bytes, as it reads as ``""`` through the library. Decode in the query where the bytes are
text: ``CAST(key AS STRING)``, ``CAST(attributes['trace'] AS STRING)``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker import Message, Record

__all__ = [
    "COLUMNS",
    "READ_SCHEMA",
    "arrow_schema",
    "kafka_batch",
    "messages_batch",
    "pa",
    "records_batch",
    "to_bytes",
    "to_text",
]

#: The source's schema as Spark DDL.
READ_SCHEMA = (
    "key binary, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "attributes map<string,binary>, id string"
)
COLUMNS = ("key", "value", "topic", "partition", "offset", "timestamp", "attributes", "id")


def pa() -> Any:
    """The ``pyarrow`` module (``MissingDependency`` naming the ``spark`` extra when absent)."""
    try:
        import pyarrow  # type: ignore[import-untyped]
    except ImportError as exc:
        from broker.errors import MissingDependency

        raise MissingDependency("spark", "pyarrow") from exc
    return pyarrow


def _attributes_type(arrow: Any) -> Any:
    return arrow.map_(arrow.string(), arrow.binary())


def arrow_schema() -> Any:
    """:data:`READ_SCHEMA` as a ``pyarrow.Schema``."""
    arrow = pa()
    return arrow.schema(
        [
            ("key", arrow.binary()),
            ("value", arrow.binary()),
            ("topic", arrow.string()),
            ("partition", arrow.int32()),
            ("offset", arrow.int64()),
            ("timestamp", arrow.timestamp("us", tz="UTC")),
            ("attributes", _attributes_type(arrow)),
            ("id", arrow.string()),
        ]
    )


def to_bytes(text: str | None) -> bytes | None:
    """A key or attribute value the library read as ``str``, as the bytes it was read from.

    Bytes the library could not decode are kept as surrogate escapes; they become those bytes
    again (``encode("utf-8", "surrogateescape")``). ``None`` stays ``None``.
    """
    return None if text is None else text.encode("utf-8", "surrogateescape")


def to_text(data: bytes | bytearray | None) -> str | None:
    """Key or attribute bytes as the library's ``str``: the inverse of :func:`to_bytes`.

    ``decode("utf-8", "surrogateescape")``: UTF-8 as text, any other byte as a surrogate escape
    (which the Kafka backend publishes as that byte again). ``None`` stays ``None``.
    """
    return None if data is None else bytes(data).decode("utf-8", "surrogateescape")


def _map_column(
    arrow: Any, rows: Iterable[Iterable[tuple[str, bytes | None]] | None], n: int, any_set: bool
) -> Any:
    """A ``map<string,binary>`` column from each row's ``(name, value)`` pairs (None: a null map).

    Built from flat lists of names and values and the row offsets (no nested list per row for
    Arrow to convert); a null value becomes ``b""``.
    """
    kind = _attributes_type(arrow)
    if not any_set:
        return arrow.nulls(n, kind)
    offsets = [0]
    names: list[str] = []
    values: list[bytes | None] = []
    missing: list[bool] = []
    for pairs in rows:
        if pairs:
            for name, value in pairs:
                names.append(name)
                values.append(value)
            missing.append(False)
        else:
            missing.append(True)
        offsets.append(len(names))
    items = arrow.array(values, arrow.binary())
    if items.null_count:
        items = items.fill_null(b"")
    return arrow.MapArray.from_arrays(
        arrow.array(offsets, arrow.int32()),
        arrow.array(names, arrow.string()),
        items,
        type=kind,
        mask=arrow.array(missing, arrow.bool_()),
    )


def _attributes(arrow: Any, items: Sequence[Mapping[str, str] | None], n: int) -> Any:
    """Portable attributes (``str -> str``) as a ``map<string,binary>`` column (see :func:`to_bytes`)."""
    any_set = any(items)
    rows = (
        [(name, value.encode("utf-8", "surrogateescape")) for name, value in a.items()] if a else None
        for a in items
    )
    return _map_column(arrow, rows, n, any_set)


def _times(arrow: Any, micros: list[int | None]) -> Any:
    return arrow.array(micros, arrow.int64()).cast(arrow.timestamp("us", tz="UTC"))


def kafka_batch(messages: Sequence[Any], topic: str, partition: int) -> Any:
    """A record batch from confluent-kafka messages of one partition (no Python object per row).

    Key, value and header values are the record's bytes, undecoded. A repeated header keeps its
    last value and a null header value reads as ``b""``, as through the library's Kafka mapping.
    """
    arrow = pa()
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    headers = [m.headers() for m in messages]
    any_headers = any(headers)
    attributes = _map_column(
        arrow, (dict(h).items() if h else None for h in headers) if any_headers else (), n, any_headers
    )
    return arrow.RecordBatch.from_arrays(
        [
            arrow.array([m.key() for m in messages], arrow.binary()),
            arrow.array([m.value() for m in messages], arrow.binary()),
            arrow.array([topic] * n, arrow.string()) if n else arrow.array([], arrow.string()),
            arrow.array([partition] * n, arrow.int32()),
            arrow.array([m.offset() for m in messages], arrow.int64()),
            _times(arrow, [t[1] * 1000 if t[0] else None for t in stamps]),
            attributes,
            arrow.nulls(n, arrow.string()),
        ],
        schema=arrow_schema(),
    )


def _micros(seconds: float | None) -> int | None:
    return None if seconds is None else round(seconds * 1_000_000)


def records_batch(records: Sequence[Record]) -> Any:
    """A record batch from portable :class:`~broker.Record` objects (keys as bytes, see :func:`to_bytes`)."""
    arrow = pa()
    n = len(records)
    return arrow.RecordBatch.from_arrays(
        [
            arrow.array([to_bytes(r.key) for r in records], arrow.binary()),
            arrow.array([r.value for r in records], arrow.binary()),
            arrow.array([r.topic for r in records], arrow.string()),
            arrow.array([r.partition for r in records], arrow.int32()),
            arrow.array([r.offset for r in records], arrow.int64()),
            _times(arrow, [_micros(r.publish_time) for r in records]),
            _attributes(arrow, [r.attributes for r in records], n),
            arrow.nulls(n, arrow.string()),
        ],
        schema=arrow_schema(),
    )


def messages_batch(messages: Sequence[Message], topic: str, first_offset: int) -> Any:
    """A record batch from acknowledgeable messages, numbered from ``first_offset`` (journal order).

    Keys and attribute values become bytes as in :func:`records_batch`.
    """
    arrow = pa()
    n = len(messages)
    return arrow.RecordBatch.from_arrays(
        [
            arrow.array([to_bytes(m.key) for m in messages], arrow.binary()),
            arrow.array([m.data for m in messages], arrow.binary()),
            arrow.array([topic] * n, arrow.string()),
            arrow.array([0] * n, arrow.int32()),
            arrow.array(range(first_offset, first_offset + n), arrow.int64()),
            _times(arrow, [_micros(m.publish_time) for m in messages]),
            _attributes(arrow, [m.attributes for m in messages], n),
            arrow.array([m.id for m in messages], arrow.string()),
        ],
        schema=arrow_schema(),
    )
