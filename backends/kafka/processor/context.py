"""The context a callback gets with each message: the message, the group table, and side effects.

Everything a context does is synchronous and cheap: ``set_value``/``delete`` write the local
store at once (``value()`` reads them back) and the table topic at the end of the batch;
``emit``/``loopback`` queue their records. The input offset is committed only after the
callback returned and every side effect was acknowledged; a failure stops the processor instead.

Misuse (an undeclared topic, no ``persist`` edge, a value the codec cannot encode) raises
:class:`ContextError` *and* stops the processor, even if the callback catches the error.
A context is valid only inside its callback, except the function ``defer_commit()`` returns.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NoReturn

from broker import Record
from broker.backends.kafka.processor.errors import CallbackFailed, ContextError
from broker.driver.forwarding import Forwarded
from broker.errors import EncodeError

if TYPE_CHECKING:
    from broker.backends.kafka.processor.partition import PartitionState
    from broker.backends.kafka.processor.processor import Processor

__all__ = ["Context"]


class Context:
    """What a callback can see and do for the message it handles."""

    __slots__ = ("_error", "_part", "_proc", "_trace", "record")

    def __init__(self, proc: Processor, part: PartitionState, record: Record) -> None:
        self._proc = proc
        self._part = part
        #: The input record (escape hatch: raw broker data).
        self.record = record
        self._error: BaseException | None = None
        #: With tracing on: the trace context headers (``traceparent``, ...) of the callback's
        #: process span, added to every emit and loopback.
        self._trace: Mapping[str, str] | None = None

    def __repr__(self) -> str:
        r = self.record
        return f"<Context {r.topic}[{r.partition}]@{r.offset} key={r.key!r}>"

    # -- the message ----------------------------------------------------------------------
    topic: Forwarded[str] = Forwarded("record", "The topic of the message (an input or the loop topic).")
    key: Forwarded[str | None] = Forwarded("record", "The message key.")
    partition: Forwarded[int] = Forwarded("record", "The partition of the message.")
    offset: Forwarded[int] = Forwarded("record", "The offset of the message.")
    timestamp: Forwarded[float | None] = Forwarded(
        "record", "When the message was published (POSIX seconds), if the broker says.", field="publish_time"
    )
    headers: Forwarded[Mapping[str, str]] = Forwarded("record", "The message headers.", field="attributes")

    @property
    def group(self) -> str:
        """The processor's group."""
        return self._proc.graph.group

    # -- misuse ---------------------------------------------------------------------------
    def _misuse(self, message: str, cause: BaseException | None = None) -> NoReturn:
        record = self.record
        exc = ContextError(
            f"callback for {record.topic}[{record.partition}]@{record.offset} "
            f"(group {self._proc.graph.group!r}): {message}"
        )
        if cause is not None:
            exc.__cause__ = cause
        if self._error is None:
            self._error = exc
        raise exc

    def _table_key(self, what: str) -> str:
        if self._part.store is None:
            self._misuse(f"{what} needs a group table, but the graph has no persist() edge")
        key = self.record.key
        if key is None:
            self._misuse(f"{what} needs a message key, but the message has none")
        return key

    # -- the group table ------------------------------------------------------------------
    def value(self) -> Any:
        """The group table's value for the message key (``None`` if there is none)."""
        key = self._table_key("value()")
        data = self._part.store.get(key)  # type: ignore[union-attr]
        if data is None:
            return None
        try:
            return self._proc._table_codec.decode(data)  # type: ignore[union-attr]
        except Exception as exc:
            self._misuse(f"cannot decode the table value of {key!r}: {exc}", exc)

    def set_value(self, value: Any) -> None:
        """Set the group table's value for the message key (``None`` is refused: use ``delete()``)."""
        key = self._table_key("set_value()")
        if value is None:
            self._misuse("set_value(None) is not allowed; call delete() to remove the key")
        try:
            data = self._proc._table_codec.encode(value)  # type: ignore[union-attr]
        except Exception as exc:
            self._misuse(f"cannot encode the table value with the persist() codec: {exc}", exc)
        part = self._part
        part.store.set(key, data)  # type: ignore[union-attr]
        part.dirty[key] = data

    def delete(self) -> None:
        """Delete the message key from the group table (and write a tombstone to the table topic)."""
        key = self._table_key("delete()")
        part = self._part
        part.store.delete(key)  # type: ignore[union-attr]
        part.dirty[key] = None

    def join(self, table: str) -> Any:
        """The message key's value in the co-partitioned table ``table`` (``None`` if absent)."""
        joined = self._part.joins.get(table)
        if joined is None:
            self._misuse(f"join({table!r}): the graph has no join({table!r}, codec) edge")
        key = self.record.key
        if key is None:
            self._misuse(f"join({table!r}) needs a message key, but the message has none")
        data = joined.storage.get(key)
        if data is None:
            return None
        codec = self._proc._join_codecs[table]
        try:
            return codec.decode(data)
        except Exception as exc:
            self._misuse(f"cannot decode {key!r} of joined table {table!r}: {exc}", exc)

    def lookup(self, table: str, key: str) -> Any:
        """The value of ``key`` in the looked-up table ``table`` (``None`` if absent)."""
        view = self._proc._lookups.get(table)
        if view is None:
            self._misuse(f"lookup({table!r}, ...): the graph has no lookup({table!r}, codec) edge")
        try:
            return view.get(key)
        except Exception as exc:
            self._misuse(f"lookup({table!r}, {key!r}) failed: {exc}", exc)

    # -- side effects ---------------------------------------------------------------------
    def emit(self, topic: str, key: str | None, value: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send ``value`` to the declared output ``topic`` (``None``: a tombstone, not encoded).

        With the processor option ``tracer_provider``, the message also carries the trace context
        of this callback's process span (``headers`` win over it).
        """
        proc = self._proc
        codec = proc._outputs.get(topic)
        if codec is None:
            if topic == proc.graph.table_topic:
                self._misuse(f"emit to the group table {topic!r} is not allowed; use set_value()")
            if topic == proc.graph.loop_topic:
                self._misuse(f"emit to the loop topic {topic!r} is not allowed; use loopback()")
            self._misuse(f"emit to {topic!r}: the graph has no output({topic!r}, codec) edge")
        data = None
        if value is not None:
            try:
                data = codec.encode(value)
            except (EncodeError, TypeError, ValueError) as exc:
                self._misuse(f"cannot encode the value emitted to {topic!r}: {exc}", exc)
        if self._trace is None:
            proc._send(self._part, topic, key, data, headers)
        else:
            proc._send(self._part, topic, key, data, headers, self._trace)

    def loopback(self, key: str, value: Any, headers: Mapping[str, str] | None = None) -> None:
        """Send ``value`` to ``key`` through the group's loop topic (handled by the loop callback)."""
        proc = self._proc
        codec = proc._loop_codec
        if codec is None:
            self._misuse("loopback(): the graph has no loop(codec, callback) edge")
        try:
            data = codec.encode(value)
        except (EncodeError, TypeError, ValueError) as exc:
            self._misuse(f"cannot encode the loopback value with the loop() codec: {exc}", exc)
        if self._trace is None:
            proc._send(self._part, proc.graph.loop_topic, key, data, headers)
        else:
            proc._send(self._part, proc.graph.loop_topic, key, data, headers, self._trace)

    def fail(self, error: BaseException | str) -> NoReturn:
        """Stop the callback and shut the processor down with ``error`` (nothing is committed)."""
        cause = error if isinstance(error, BaseException) else None
        record = self.record
        exc = CallbackFailed(
            f"callback for {record.topic}[{record.partition}]@{record.offset} failed: {error}"
        )
        exc.__cause__ = cause
        if self._error is None:
            self._error = exc
        raise exc

    def defer_commit(self) -> Callable[[BaseException | None], None]:
        """Hold the commit of this message until the returned function is called.

        Call it exactly once, with ``None`` when the asynchronous work succeeded or an exception
        when it failed (the processor then stops). Later messages are processed meanwhile, but
        no offset at or after this one is committed until it is called.
        """
        return self._proc._defer(self._part, self.record)
