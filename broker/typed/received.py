"""Received messages and records with their payload decoded to the application's type, lazily.

A typed consumer hands out the very :class:`~broker.Message` / :class:`~broker.Record` objects
the backend delivered (no wrapper, no copy): it attaches its :class:`Binding` to each, and
``decoded`` (a property of every Message and Record) decodes the payload on first read and keeps
it. The bytes (``data`` / ``value``), key, attributes and settlement are untouched. The content
type the message carries picks the decoder (see :mod:`broker.typed.formats`); a payload that does
not decode raises :class:`~broker.errors.DecodeError` from ``decoded``, carrying the message as
``received``, so fetching never fails because of one bad payload.

:class:`TypedMessage` and :class:`TypedRecord` are the names the type checker sees for such
objects (``decoded`` typed as ``T``); at run time they are plain Messages and Records, so
``broker.ack_all``, ``broker.commit_highest_offsets`` and every function taking a Message take
them as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Generic, TypeVar, cast

from broker.errors import NotSupported
from broker.message import UNDECODED, Message, Record, has_native_properties, own_acker
from broker.typed.binding import Binding
from broker.typed.formats import CONTENT_TYPE

__all__ = [
    "TypedMessage",
    "TypedRecord",
    "content_type",
    "native_properties",
    "tag_message",
    "tag_messages",
    "tag_record",
    "tag_records",
]

T = TypeVar("T")


class TypedMessage(Message, Generic[T]):
    """The static type of a message a typed consumer handed out: a :class:`~broker.Message` whose
    ``decoded`` is ``T``. Never instantiated: typed consumers hand out the backend's own messages."""

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def decoded(self) -> T:
            """The payload as ``T``: decoded on first read, then kept. Raises ``DecodeError``."""
            ...


class TypedRecord(Record, Generic[T]):
    """The static type of a record a typed consumer handed out: a :class:`~broker.Record` whose
    ``decoded`` is ``T`` (None for a tombstone). Never instantiated."""

    __slots__ = ()

    if TYPE_CHECKING:

        @property
        def decoded(self) -> T | None:
            """The value as ``T`` (None for a tombstone): decoded on first read, then kept."""
            ...


def tag_message(message: Message, binding: Binding[T]) -> TypedMessage[T]:
    """``message`` with ``binding`` attached: its ``decoded`` decodes with it (the same object)."""
    message._binding = binding
    message._decoded = UNDECODED
    return cast("TypedMessage[T]", message)


def tag_messages(messages: list[Message], binding: Binding[T]) -> list[TypedMessage[T]]:
    """Every message of ``messages`` tagged with ``binding``, in place; the same list."""
    for message in messages:
        message._binding = binding
        message._decoded = UNDECODED
    return cast("list[TypedMessage[T]]", messages)


def tag_record(record: Record, binding: Binding[T]) -> TypedRecord[T]:
    """``record`` with ``binding`` attached: its ``decoded`` decodes with it (the same object)."""
    record._binding = binding
    record._decoded = UNDECODED
    return cast("TypedRecord[T]", record)


def tag_records(records: Sequence[Record], binding: Binding[T]) -> list[TypedRecord[T]]:
    """Every record of ``records`` tagged with ``binding``, in place; the same list when it is one.

    A :class:`~broker.RecordBatch` stays one (and keeps what it knows of its highest offsets).
    """
    for record in records:
        record._binding = binding
        record._decoded = UNDECODED
    return cast("list[TypedRecord[T]]", records if isinstance(records, list) else list(records))


def content_type(received: Message | Record) -> str | None:
    """The content type ``received`` carries (its ``content-type`` attribute; None: none)."""
    attributes: Mapping[str, str] = received.attributes
    return attributes.get(CONTENT_TYPE)


def native_properties(message: Message) -> Mapping[str, Any]:
    """``message``'s application properties with the types the broker gave them, beside its
    portable ``str -> str`` attributes: Service Bus application properties and RabbitMQ headers
    (int, float, bool, datetime, UUID, bytes, ...). Properties the backend uses for itself are left
    out. Raises :class:`~broker.errors.NotSupported` on brokers whose properties are strings only.
    """
    acker = own_acker(message)
    if not has_native_properties(acker):
        raise NotSupported(
            f"{type(acker).__name__} has no typed message properties (Service Bus and RabbitMQ have): "
            "read message.attributes"
        )
    return acker.native_properties(message)
