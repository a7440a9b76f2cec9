"""The rows the ``broker`` source yields, built column by column as Arrow record batches.

Every backend reads into one schema (:data:`READ_SCHEMA`), so a query does not change with the
broker: ``key`` (string), ``value`` (binary), ``topic``, ``partition``, ``offset`` (Kafka offset,
JetStream stream sequence, Pulsar packed message id, or the journal sequence of an
acknowledging source), ``timestamp`` (publish time), ``attributes`` (headers / properties) and
``id`` (the broker's message id where messages have one: Pub/Sub, Service Bus; null for logs,
whose records are identified by ``topic``, ``partition`` and ``offset``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from broker.message import Message, Record

__all__ = [
    "COLUMNS",
    "READ_SCHEMA",
    "arrow_schema",
    "kafka_batch",
    "messages_batch",
    "pa",
    "records_batch",
]

#: The source's schema as Spark DDL.
READ_SCHEMA = (
    "key string, value binary, topic string, partition int, offset long, timestamp timestamp, "
    "attributes map<string,string>, id string"
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


def arrow_schema() -> Any:
    """:data:`READ_SCHEMA` as a ``pyarrow.Schema``."""
    arrow = pa()
    return arrow.schema(
        [
            ("key", arrow.string()),
            ("value", arrow.binary()),
            ("topic", arrow.string()),
            ("partition", arrow.int32()),
            ("offset", arrow.int64()),
            ("timestamp", arrow.timestamp("us", tz="UTC")),
            ("attributes", arrow.map_(arrow.string(), arrow.string())),
            ("id", arrow.string()),
        ]
    )


def _keys(arrow: Any, raw: list[bytes | None]) -> Any:
    """Key bytes as a string column (invalid UTF-8 is replaced, as Arrow strings must be UTF-8)."""
    column = arrow.array(raw, arrow.binary())
    try:
        return column.cast(arrow.string())
    except arrow.ArrowInvalid:
        return arrow.array(
            [k.decode("utf-8", "replace") if k is not None else None for k in raw], arrow.string()
        )


def _attributes(arrow: Any, items: Sequence[Mapping[str, str] | None], n: int) -> Any:
    kind = arrow.map_(arrow.string(), arrow.string())
    if not any(items):
        return arrow.nulls(n, kind)
    return arrow.array([list(a.items()) if a else None for a in items], kind)


def _times(arrow: Any, micros: list[int | None]) -> Any:
    return arrow.array(micros, arrow.int64()).cast(arrow.timestamp("us", tz="UTC"))


def kafka_batch(messages: Sequence[Any], topic: str, partition: int) -> Any:
    """A record batch from confluent-kafka messages of one partition (no Python object per row)."""
    arrow = pa()
    n = len(messages)
    stamps = [m.timestamp() for m in messages]
    headers = [m.headers() for m in messages]
    if any(headers):
        attributes = _attributes(
            arrow,
            [
                {k: (v.decode("utf-8", "replace") if v is not None else "") for k, v in h} if h else None
                for h in headers
            ],
            n,
        )
    else:
        attributes = arrow.nulls(n, arrow.map_(arrow.string(), arrow.string()))
    return arrow.RecordBatch.from_arrays(
        [
            _keys(arrow, [m.key() for m in messages]),
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
    """A record batch from portable :class:`~broker.Record` objects."""
    arrow = pa()
    n = len(records)
    return arrow.RecordBatch.from_arrays(
        [
            arrow.array([r.key for r in records], arrow.string()),
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
    """A record batch from acknowledgeable messages, numbered from ``first_offset`` (journal order)."""
    arrow = pa()
    n = len(messages)
    return arrow.RecordBatch.from_arrays(
        [
            arrow.array([m.key for m in messages], arrow.string()),
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
