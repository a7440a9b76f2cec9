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

A :class:`~broker.message.Record` of ``records()`` maps the same fields (``value`` is ``data``);
its ``offset`` is the id's number (:func:`broker.backends.redis.records.offset_of`), its partition
0, and its ``raw`` a :class:`LogEntry`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any, cast

from broker import Message, OutboundMessage, Record
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker, Committer, LazyMessage

__all__ = [
    "ATTRIBUTE_PREFIX",
    "DATA_FIELD",
    "KEY_FIELD",
    "Entry",
    "LogEntry",
    "RedisMessage",
    "publish_time",
    "read_messages",
    "to_fields",
    "to_message",
    "to_pairs",
    "to_record",
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


@dataclass(frozen=True, slots=True)
class LogEntry(Entry):
    """One stream entry read by ``records()``: ``Record.raw`` of this backend."""

    #: How many entries the stream had received up to and including this one (the group's
    #: ``entries-read`` once this entry is committed); None when the reader cannot know it.
    entries_read: int | None = None


def to_fields(message: OutboundMessage) -> dict[bytes, bytes]:
    """The fields ``XADD`` writes for ``message`` (validated by the portable layer)."""
    fields: dict[bytes, bytes] = {DATA_FIELD: message.data}
    if message.key is not None:
        fields[KEY_FIELD] = message.key.encode()
    for name, value in message.attributes.items():
        fields[ATTRIBUTE_PREFIX + name.encode()] = value.encode()
    return fields


def to_pairs(message: OutboundMessage) -> list[bytes]:
    """The fields of :func:`to_fields` as the flat ``name, value, ...`` list ``XADD`` sends."""
    pairs = [DATA_FIELD, message.data]
    if message.key is not None:
        pairs += (KEY_FIELD, message.key.encode())
    if message.attributes:
        for name, value in message.attributes.items():
            pairs += (ATTRIBUTE_PREFIX + name.encode(), value.encode())
    return pairs


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


def _pairs_dict(pairs: list[bytes] | None) -> dict[bytes, bytes]:
    """The fields of a flat ``[name, value, ...]`` list as the server sends them (a later field of
    the same name wins, as in redis-py's parsing)."""
    if not pairs:
        return {}
    values = iter(pairs)
    return dict(zip(values, values, strict=False))


def _data_of(pairs: list[bytes] | None) -> bytes:
    """The ``data`` field of a flat field list (the last one, as in :func:`_pairs_dict`); ``b""``
    without one."""
    if not pairs:
        return b""
    for index in range(len(pairs) - 2, -1, -2):
        if pairs[index] == DATA_FIELD:
            return pairs[index + 1]
    return b""


def _entry_of(message: RedisMessage) -> Entry:
    return Entry(message._stream, message.id, _pairs_dict(message._pairs))


#: What a :class:`RedisMessage` decodes on first read, each from the message itself.
_DECODERS: dict[str, Callable[[RedisMessage], Any]] = {
    "id": lambda message: message._entry_id.decode(),
    "raw": _entry_of,
    "key": lambda message: _key_of(message.raw),
    "attributes": lambda message: _attributes_of(message.raw),
    "publish_time": lambda message: publish_time(message.id),
    "delivery_attempt": lambda message: 1,  # read by XREADGROUP ... >: its first delivery
}

#: The state every new message starts in (pending), as :class:`LazyMessage` sets it.
_FRESH_STATE = LazyMessage(b"", None, cast(Acker, None))._state


class RedisMessage(LazyMessage):
    """The ``Message`` of an entry ``XREADGROUP ... >`` read (its first delivery), built straight
    from the server's reply by :func:`read_messages`.

    Only ``data`` is taken up front; ``id``, ``raw`` (the :class:`Entry`), ``key``,
    ``attributes``, ``publish_time`` and ``delivery_attempt`` (1) are decoded from the entry when
    first read and kept, with the values :func:`to_message` gives: most consumers read ``data``
    and ack, and a batch then costs no decoding, no field dict and no id string per entry (the
    acker sends the entry ids as the server gave them).
    """

    __slots__ = ("_entry_id", "_pairs", "_stream")

    _entry_id: bytes
    _pairs: list[bytes] | None
    _stream: str

    decoders = _DECODERS  # functions of the message, not of raw

    def __getattr__(self, name: str) -> Any:
        # Reached only for a slot not set yet: decode it from the entry now.
        decode = _DECODERS.get(name)
        if decode is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = decode(self)
        object.__setattr__(self, name, value)
        return value


def read_messages(
    stream: str,
    entries: Sequence[Sequence[Any]],
    acker: Acker,
    received: float,
    ack_deadline: float,
    due: float,
) -> list[Message]:
    """The messages of ``entries`` of a raw ``XREADGROUP ... >`` reply (``[id, [name, value,
    ...]]`` each, bytes as the server sent them), received at ``received`` (epoch seconds), with
    an ack deadline of ``ack_deadline`` seconds that passes at ``due`` (monotonic; ``0.0``: none):
    a consumer's hot path: one loop, and no call per entry but the object's allocation."""
    fresh = _FRESH_STATE
    out: list[Message] = list(map(object.__new__, repeat(RedisMessage, len(entries))))
    for message, (entry_id, pairs) in zip(out, entries, strict=True):
        message._stream = stream  # type: ignore[attr-defined]
        message._entry_id = entry_id  # type: ignore[attr-defined]
        message._pairs = pairs  # type: ignore[attr-defined]
        # this backend's own entries: ``data`` alone, or first (``to_pairs``)
        message.data = pairs[1] if pairs and pairs[0] == DATA_FIELD and not pairs[2:] else _data_of(pairs)
        message.acker = acker
        message.ingestion_time = received
        message._state = fresh
        message._ack_deadline = ack_deadline
        message._due = due
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


def to_record(
    stream: str,
    entry_id: str,
    offset: int,
    fields: Mapping[bytes, bytes],
    entries_read: int | None,
    committer: Committer,
    received: float,
) -> Record:
    """The :class:`~broker.message.Record` of an entry ``records()`` read from ``stream``, at ``offset``."""
    entry = LogEntry(stream, entry_id, fields, entries_read)
    return Record(
        topic=stream,
        partition=0,
        offset=offset,
        value=fields.get(DATA_FIELD, b""),
        key=_key_of(entry),
        attributes=_attributes_of(entry),
        publish_time=publish_time(entry_id),
        ingestion_time=received,
        raw=entry,
        committer=committer,
    )
