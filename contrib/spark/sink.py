"""Writing rows to any backend through its publisher, with a deterministic message id per row.

Input columns (others are ignored): ``value`` (binary or string; null writes a tombstone, which
needs a partitioned-log backend such as Kafka), ``key`` (binary or string), ``topic`` (string;
the ``topic`` option wins when both are given, as in Spark's Kafka sink), ``attributes``
(``map<string,binary>`` or ``map<string,string>``) and ``id`` (string). So the rows the
``broker`` source yields (binary keys and attribute values) can be written as they are.

Binary keys and attribute values become the library's ``str`` with
``decode("utf-8", "surrogateescape")``: UTF-8 text as itself, any other byte as a surrogate
escape, which the Kafka backend turns back into that byte when it publishes. A row read from
Kafka and written to Kafka keeps its key and header bytes exactly. Other backends get the same
``str`` the library hands out when it reads such bytes, and treat it as when the library
publishes it. String columns are text already and are used as they are.

Every message carries an id attribute (option ``idAttribute``, ``none`` to leave it out). By
default it is the attribute the backend maps onto its native message id (``msg_id_attribute`` or
``message_id_attribute`` in its settings: JetStream's ``Nats-Msg-Id``, so the server drops a
replayed copy), else ``polybroker-msg-id`` (a Kafka header, a Pub/Sub attribute, a Service Bus
application property), for downstream de-duplication. It is the row's ``id`` column when set, else
``<query id>:<batch id>:<task partition>:<row index>`` for streaming writes (stable when Spark
retries a task or replays a batch after a restart, given the same rows in the same order, as a
replayable source without a shuffle provides) and ``<write id>:<task partition>:<row index>`` for
batch writes. Delivery is at-least-once: a retried task publishes its rows again, with the same
ids.

Trace context: an ``attributes`` column's ``traceparent`` / ``tracestate`` / ``baggage`` entries
are written as they are, so rows read from a traced broker keep their own trace. Options
``trace.<name>`` (made on the driver by :func:`trace_options` from its current OpenTelemetry
context) add ``<name>`` to every row that carries no ``traceparent`` of its own. The executors
make no spans and need no OpenTelemetry: they only copy these strings (see ``docs/spark.md``).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Mapping
from typing import Any, Final

from broker import Backend, OutboundMessage
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import to_text
from broker.contrib.spark.options import Options
from broker.errors import ConfigError

__all__ = ["DEFAULT_ID_ATTRIBUTE", "TRACE_OPTION_PREFIX", "id_attribute", "trace_options", "write_batches"]

#: The attribute that carries a row's message id on backends without a native one.
DEFAULT_ID_ATTRIBUTE: Final = "polybroker-msg-id"
#: Options ``trace.<name>`` give attribute ``<name>`` to rows with no ``traceparent`` of their own.
TRACE_OPTION_PREFIX: Final = "trace."


def trace_options(context: Any = None, *, propagator: Any = None) -> dict[str, str]:
    """Sink options carrying ``context``'s trace context (default: the current one), for the driver.

    ``df.write.format("broker").options(**trace_options())``: every row written without a
    ``traceparent`` attribute of its own carries this context (``trace.traceparent``, and
    ``trace.tracestate`` / ``trace.baggage`` when present). Empty when there is no valid span.
    Needs OpenTelemetry on the driver only (``MissingDependency`` naming the ``otel`` extra).
    """
    from broker.telemetry.propagation import inject

    return {TRACE_OPTION_PREFIX + k: v for k, v in inject(None, context, propagator=propagator).items()}


def trace_attributes(options: Options) -> dict[str, str]:
    """The attributes the ``trace.<name>`` options give rows without a ``traceparent``."""
    return {
        key.removeprefix(TRACE_OPTION_PREFIX): value
        for key, value in options.raw.items()
        if key.startswith(TRACE_OPTION_PREFIX) and len(key) > len(TRACE_OPTION_PREFIX) and value
    }


def id_attribute(options: Options, backend: Backend) -> str | None:
    """The attribute name for message ids (None when option ``idAttribute`` is ``none``)."""
    chosen = options.get("idAttribute")
    if chosen is not None:
        return None if chosen.lower() == "none" else chosen
    settings = getattr(backend, "settings", None)
    for name in ("msg_id_attribute", "message_id_attribute"):  # the backend maps it to a native id
        native = getattr(settings, name, None)
        if isinstance(native, str) and native:
            return native
    return DEFAULT_ID_ATTRIBUTE


def _text(value: Any) -> Any:
    """Binary as the library's ``str`` (:func:`~broker.contrib.spark.arrow.to_text`); anything else as is."""
    return to_text(value) if isinstance(value, bytes | bytearray) else value


def _texts(column: Any) -> list[str | None]:
    """A string or binary column as ``str`` values (binary decoded as :func:`_text` does)."""
    values: list[Any] = column.to_pylist()
    return [_text(v) for v in values]


def _attribute_maps(column: Any) -> list[dict[str, str] | None]:
    """Each row's attributes (a ``map<string,binary>`` or ``map<string,string>``) as a ``dict``."""
    maps: list[Any] = column.to_pylist()
    return [{name: _text(value) for name, value in pairs} if pairs else None for pairs in maps]


def _datas(column: Any) -> list[bytes | None]:
    values: list[Any] = column.to_pylist()
    return [v.encode("utf-8") if isinstance(v, str) else v for v in values]


class _Rows:
    """One Arrow batch as per-topic lists of messages (built in the Spark thread)."""

    def __init__(self) -> None:
        self.by_topic: dict[str, list[OutboundMessage]] = {}
        self.tombstones = False
        self.ordered: list[tuple[str, bytes | None, str | None, dict[str, str]]] = []


def _rows(
    batch: Any,
    topic: str | None,
    id_attr: str | None,
    id_base: str,
    first: int,
    trace: Mapping[str, str] | None = None,
) -> _Rows:
    names = batch.schema.names
    if "value" not in names:
        raise ConfigError("the broker sink needs a 'value' column (binary or string)")
    n = batch.num_rows
    values = _datas(batch.column(names.index("value")))
    keys = _texts(batch.column(names.index("key"))) if "key" in names else [None] * n
    if topic is not None:
        topics: list[str | None] = [topic] * n
    elif "topic" in names:
        topics = _texts(batch.column(names.index("topic")))
    else:
        raise ConfigError("the broker sink needs option 'topic' or a 'topic' column")
    attributes = (
        _attribute_maps(batch.column(names.index("attributes"))) if "attributes" in names else [None] * n
    )
    ids: list[Any] = _texts(batch.column(names.index("id"))) if "id" in names else [None] * n
    out = _Rows()
    for i in range(n):
        target = topics[i]
        if not target:
            raise ConfigError(f"row {first + i} of the batch has no topic")
        attrs: dict[str, str] = attributes[i] or {}
        if trace and "traceparent" not in attrs:
            attrs = {**trace, **attrs}
        if id_attr is not None:
            attrs[id_attr] = ids[i] or f"{id_base}:{first + i}"
        data = values[i]
        if data is None:
            out.tombstones = True
        else:
            out.by_topic.setdefault(target, []).append(OutboundMessage(data, keys[i], attrs))
        out.ordered.append((target, data, keys[i], attrs))
    return out


async def _publish(backend: Backend, publisher: Any, rows: _Rows, logs: dict[str, Any]) -> None:
    if rows.tombstones:
        log_factory = getattr(backend, "log", None)
        if log_factory is None:
            raise ConfigError(
                f"null values (tombstones) need a partitioned-log backend such as Kafka, not {backend.name}"
            )
        log = logs.get("log")
        if log is None:
            log = logs["log"] = log_factory()
        sends = [
            log.send(topic, data, key=key, attributes=attrs or None)
            for topic, data, key, attrs in rows.ordered
        ]
        await asyncio.gather(*sends)
        return
    await asyncio.gather(*(publisher.topic(t).batch_publish(*msgs) for t, msgs in rows.by_topic.items()))


def write_batches(options: Options, batches: Iterator[Any], id_base: str) -> int:
    """Publish every row of ``batches`` (Arrow record batches); returns the rows written.

    One batch is published while the next is read from Spark; a batch's messages are all
    acknowledged by the broker before the next batch is published, so per-key order holds.
    """
    topic = options.get("topic")
    backend = options.connect()
    event_loop = runtime.loop()
    count = 0
    logs: dict[str, Any] = {}
    pending: Any = None
    try:
        id_attr = id_attribute(options, backend)
        trace = trace_attributes(options)
        publisher = backend.publisher()
        for batch in batches:
            rows = _rows(batch, topic, id_attr, id_base, count, trace)
            count += batch.num_rows
            if pending is not None:
                pending.result()
            pending = asyncio.run_coroutine_threadsafe(_publish(backend, publisher, rows, logs), event_loop)
        if pending is not None:
            pending.result()
            pending = None
    finally:
        if pending is not None:
            pending.cancel()
        runtime.run(_close(backend, logs))
    return count


async def _close(backend: Backend, logs: Mapping[str, Any]) -> None:
    log = logs.get("log")
    if log is not None:
        await log.close()
    await backend.close()
