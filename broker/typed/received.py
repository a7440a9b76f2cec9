"""Received messages and records with their payload decoded to the application's type, lazily.

:class:`TypedMessage` and :class:`TypedRecord` wrap the :class:`~broker.Message` /
:class:`~broker.Record` a backend delivered: the bytes (``data`` / ``value``), key, attributes and
settlement (``ack``, ``nack``, ...) are the wrapped object's, unchanged; ``decoded`` is the
payload as ``T``, decoded on first read and kept. The content type the message carries picks the
decoder (see :mod:`broker.typed.formats`); a payload that does not decode raises
:class:`~broker.errors.DecodeError` from ``decoded``, carrying the wrapped message as
``received``, so fetching never fails because of one bad payload.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final, Generic, TypeVar

from broker.message import Message, Record
from broker.typed.binding import Binding
from broker.typed.formats import CONTENT_TYPE

__all__ = ["TypedMessage", "TypedRecord"]

T = TypeVar("T")

_UNSET: Final[Any] = object()


class TypedMessage(Generic[T]):
    """A received :class:`~broker.Message` whose payload decodes to ``T`` (``decoded``)."""

    __slots__ = ("_binding", "_decoded", "message")

    def __init__(self, message: Message, binding: Binding[T]) -> None:
        #: The message as the backend delivered it.
        self.message = message
        self._binding = binding
        self._decoded: Any = _UNSET

    def __repr__(self) -> str:
        return f"<TypedMessage {self.message!r} via {self._binding!r}>"

    @property
    def decoded(self) -> T:
        """The payload as ``T``: decoded on first read, then kept. Raises ``DecodeError``."""
        value = self._decoded
        if value is not _UNSET:
            return value  # type: ignore[no-any-return]
        message = self.message
        binding = self._binding
        content_type = message.attributes.get(CONTENT_TYPE)
        if content_type is None or content_type == binding.content_type:
            decode = binding.decoder
        else:
            try:
                decode = binding.decoder_for(content_type)
            except Exception as exc:
                raise binding.failure(exc, message, content_type) from exc
        try:
            value = decode(message.data)
        except Exception as exc:
            raise binding.failure(exc, message, content_type) from exc
        self._decoded = value
        return value

    @property
    def binding(self) -> Binding[T]:
        """The binding the payload decodes with."""
        return self._binding

    @property
    def id(self) -> str:
        """The wrapped message's id."""
        return self.message.id

    @property
    def data(self) -> bytes:
        """The payload bytes, as received."""
        return self.message.data

    @property
    def key(self) -> str | None:
        """The message key."""
        return self.message.key

    @property
    def attributes(self) -> Mapping[str, str]:
        """The portable ``str -> str`` attributes (with ``content-type``)."""
        return self.message.attributes

    @property
    def content_type(self) -> str | None:
        """The content type the message carries (None: none)."""
        return self.message.attributes.get(CONTENT_TYPE)

    @property
    def publish_time(self) -> float | None:
        """When the broker took the message (POSIX seconds), where it says."""
        return self.message.publish_time

    @property
    def ingestion_time(self) -> float | None:
        """When the consumer received the message (POSIX seconds)."""
        return self.message.ingestion_time

    @property
    def delivery_attempt(self) -> int | None:
        """1 on the first delivery, where the broker counts."""
        return self.message.delivery_attempt

    @property
    def raw(self) -> Any:
        """The SDK's own object."""
        return self.message.raw

    @property
    def state(self) -> str:
        """``"pending"``, ``"acked"``, ``"nacked"`` or ``"dead-lettered"``."""
        return self.message.state

    @property
    def settled(self) -> bool:
        """True once the message was acked, nacked or dead-lettered."""
        return self.message.settled

    async def ack(self) -> None:
        """Acknowledge the message (see :meth:`broker.Message.ack`)."""
        await self.message.ack()

    async def nack(self, delay: float | None = None) -> None:
        """Have the message redelivered (see :meth:`broker.Message.nack`)."""
        await self.message.nack(delay)

    async def in_progress(self) -> None:
        """Extend the ack deadline (see :meth:`broker.Message.in_progress`)."""
        await self.message.in_progress()

    async def dead_letter(self, reason: str | None = None) -> None:
        """Stop redelivering the message (see :meth:`broker.Message.dead_letter`)."""
        await self.message.dead_letter(reason)


class TypedRecord(Generic[T]):
    """A :class:`~broker.Record` whose value decodes to ``T`` (``decoded``; None for a tombstone)."""

    __slots__ = ("_binding", "_decoded", "record")

    def __init__(self, record: Record, binding: Binding[T]) -> None:
        #: The record as the backend delivered it.
        self.record = record
        self._binding = binding
        self._decoded: Any = _UNSET

    def __repr__(self) -> str:
        return f"<TypedRecord {self.record!r} via {self._binding!r}>"

    @property
    def decoded(self) -> T | None:
        """The value as ``T`` (None for a tombstone): decoded on first read, then kept."""
        value = self._decoded
        if value is not _UNSET:
            return value  # type: ignore[no-any-return]
        record = self.record
        data = record.value
        if data is None:
            self._decoded = None
            return None
        binding = self._binding
        content_type = record.attributes.get(CONTENT_TYPE)
        if content_type is None or content_type == binding.content_type:
            decode = binding.decoder
        else:
            try:
                decode = binding.decoder_for(content_type)
            except Exception as exc:
                raise binding.failure(exc, record, content_type) from exc
        try:
            value = decode(data)
        except Exception as exc:
            raise binding.failure(exc, record, content_type) from exc
        self._decoded = value
        return value

    @property
    def binding(self) -> Binding[T]:
        """The binding the value decodes with."""
        return self._binding

    @property
    def topic(self) -> str:
        """The record's topic."""
        return self.record.topic

    @property
    def partition(self) -> int:
        """The record's partition."""
        return self.record.partition

    @property
    def offset(self) -> int:
        """The record's offset in its partition."""
        return self.record.offset

    @property
    def value(self) -> bytes | None:
        """The value bytes, as read (None for a tombstone)."""
        return self.record.value

    @property
    def key(self) -> str | None:
        """The record key."""
        return self.record.key

    @property
    def attributes(self) -> Mapping[str, str]:
        """The portable ``str -> str`` attributes (headers)."""
        return self.record.attributes

    @property
    def content_type(self) -> str | None:
        """The content type the record carries (None: none)."""
        return self.record.attributes.get(CONTENT_TYPE)

    @property
    def publish_time(self) -> float | None:
        """The record's timestamp (POSIX seconds), where the broker says."""
        return self.record.publish_time

    @property
    def ingestion_time(self) -> float | None:
        """When the consumer read the record (POSIX seconds)."""
        return self.record.ingestion_time

    @property
    def raw(self) -> Any:
        """The SDK's own object."""
        return self.record.raw

    async def ack(self) -> None:
        """Commit this offset and every lower one of its partition (see :meth:`broker.Record.ack`)."""
        await self.record.ack()
