"""The portable model in Redis Streams terms, in one place: entries to and from messages.

An entry's fields (redis-py <-> ``OutboundMessage`` / :class:`~broker.message.Message`):

=====================  ===================================================================
field                  what it holds
=====================  ===================================================================
``data``               the payload (bytes, as published)
``key``                the message key (absent when the message has none)
``attr:<name>``        the attribute ``<name>`` (UTF-8); the prefix keeps attributes apart
                       from ``data`` and ``key`` whatever their names
any other field        read as an attribute of the same name: entries written by other
                       clients (a raw ``XADD orders * customer 7``) arrive with their fields
                       as attributes; an entry without ``data`` has an empty payload
=====================  ===================================================================

``Message.id`` is the entry id (``<milliseconds>-<sequence>``, the same on every redelivery),
``publish_time`` the milliseconds of the id (when the server added the entry), and ``raw`` an
:class:`Entry` (stream, id, the fields as the server sent them). Field names and values that are
not UTF-8 (possible only from other clients) are decoded with replacement characters.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from broker import Message, OutboundMessage
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker, LazyMessage

__all__ = [
    "ATTRIBUTE_PREFIX",
    "DATA_FIELD",
    "KEY_FIELD",
    "Entry",
    "RedisMessage",
    "publish_time",
    "to_fields",
    "to_message",
    "to_messages",
]

#: The field that holds the payload.
DATA_FIELD = b"data"
#: The field that holds the key.
KEY_FIELD = b"key"
#: The prefix of the fields that hold attributes.
ATTRIBUTE_PREFIX = b"attr:"


@dataclass(frozen=True, slots=True)
class Entry:
    """One stream entry as read: ``Message.raw`` of this backend."""

    #: The stream (the topic).
    stream: str
    #: The entry id, ``<milliseconds>-<sequence>``.
    id: str
    #: The entry's fields and values, as the server sent them.
    fields: Mapping[bytes, bytes]


def to_fields(message: OutboundMessage) -> dict[bytes, bytes]:
    """The fields ``XADD`` writes for ``message`` (validated by the portable layer)."""
    fields: dict[bytes, bytes] = {DATA_FIELD: message.data}
    if message.key is not None:
        fields[KEY_FIELD] = message.key.encode()
    for name, value in message.attributes.items():
        fields[ATTRIBUTE_PREFIX + name.encode()] = value.encode()
    return fields


def _text(value: bytes) -> str:
    return value.decode("utf-8", "replace")


def publish_time(entry_id: str) -> float | None:
    """The time (epoch seconds) in an entry id's milliseconds part; None for an id without one."""
    millis, _, _ = entry_id.partition("-")
    return int(millis) / 1000.0 if millis.isdigit() else None


def _key_of(entry: Entry) -> str | None:
    value = entry.fields.get(KEY_FIELD)
    return None if value is None else _text(value)


def _attributes_of(entry: Entry) -> Mapping[str, str]:
    attributes: dict[str, str] = {}
    for name, value in entry.fields.items():
        if name == DATA_FIELD or name == KEY_FIELD:
            continue
        if name.startswith(ATTRIBUTE_PREFIX):
            attributes[_text(name[len(ATTRIBUTE_PREFIX) :])] = _text(value)
    for name, value in entry.fields.items():  # another client's fields, unless an attribute has the name
        if name != DATA_FIELD and name != KEY_FIELD and not name.startswith(ATTRIBUTE_PREFIX):
            attributes.setdefault(_text(name), _text(value))
    return attributes or EMPTY_ATTRIBUTES


class RedisMessage(LazyMessage):
    """A ``Message`` whose key, attributes and publish time are decoded from its
    :class:`Entry` when first read (many consumers read only ``data``; the values are the same as
    :func:`to_message` gives)."""

    __slots__ = ()

    decoders = {
        "key": _key_of,
        "attributes": _attributes_of,
        "publish_time": lambda entry: publish_time(entry.id),
    }


def to_messages(
    stream: str,
    entries: Iterable[tuple[bytes | str, Mapping[bytes, bytes] | None]],
    acker: Acker,
    received: float,
    delivery_attempt: int,
) -> list[Message]:
    """The messages of entries read from ``stream`` (``(id, fields)`` as redis-py gives them), each
    mapped as :func:`to_message` maps one; the hot path of a consumer."""
    out: list[Message] = []
    append = out.append
    new_entry = Entry
    for entry_id, fields in entries:
        ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
        fields = fields or {}
        message = RedisMessage(fields.get(DATA_FIELD, b""), new_entry(stream, ident, fields), acker, received)
        message.id = ident
        message.delivery_attempt = delivery_attempt
        append(message)
    return out


def to_message(
    stream: str,
    entry_id: bytes | str,
    fields: Mapping[bytes, bytes] | None,
    acker: Acker,
    received: float,
    delivery_attempt: int,
) -> Message:
    """The :class:`~broker.message.Message` of an entry read from ``stream`` (its fields mapped as
    the module says; None fields, an entry deleted meanwhile, read as empty)."""
    ident = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    fields = fields or {}
    data = b""
    key: str | None = None
    attributes: dict[str, str] = {}
    for name, value in fields.items():
        if name == DATA_FIELD:
            data = value
        elif name == KEY_FIELD:
            key = _text(value)
        elif name.startswith(ATTRIBUTE_PREFIX):
            attributes[_text(name[len(ATTRIBUTE_PREFIX) :])] = _text(value)
        else:
            attributes.setdefault(_text(name), _text(value))
    return Message(
        id=ident,
        data=data,
        key=key,
        attributes=attributes or EMPTY_ATTRIBUTES,
        publish_time=publish_time(ident),
        ingestion_time=received,
        delivery_attempt=delivery_attempt,
        raw=Entry(stream, ident, fields),
        acker=acker,
    )
