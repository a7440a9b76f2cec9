"""Pulsar client objects <-> polybroker data, in one place.

* ``OutboundMessage`` -> client message: ``data`` is the payload, ``key`` the partition key (it
  routes keyed messages of a partitioned topic to one partition, and orders them on Key_Shared
  subscriptions), ``attributes`` the message properties.
* client message -> ``Message``: ``id`` is the serialized message id in hex (give it back as a
  reader's ``start``), ``publish_time`` the broker's publish timestamp, ``delivery_attempt`` the
  redelivery count + 1. Pulsar has no way to tell an empty key from none: both read back as None.
  Every field but ``data`` is decoded on first read (see :class:`PulsarMessage`).
* client message -> ``Record``: ``partition`` is the topic partition (0 for a non-partitioned
  topic) and ``offset`` packs the message id, ordered like the messages of the partition:
  ``ledger_id << 40 | entry_id << 16 | (batch_index + 1)``.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any, Final

import _pulsar  # type: ignore[import-not-found]

from broker import Message, OutboundMessage, Record
from broker.driver.acking import Acker, Committer, LazyMessage
from broker.driver.attributes import validate_attributes
from broker.errors import ConfigError, InvalidMessage

__all__ = [
    "DEFAULT_TENANT_NAMESPACE",
    "PulsarMessage",
    "build",
    "message_id",
    "message_id_text",
    "offset_of",
    "short_topic",
    "to_message",
    "to_messages",
    "to_records",
]

#: Topics named without ``persistent://tenant/namespace/`` live here.
DEFAULT_TENANT_NAMESPACE: Final = "persistent://public/default/"
_PARTITION_SUFFIX: Final = re.compile(r"-partition-\d+$")


def _check(message: OutboundMessage) -> bytes:
    if not isinstance(message, OutboundMessage):
        raise InvalidMessage(f"publish takes an OutboundMessage, got {type(message).__name__}")
    data = message.data
    if type(data) is not bytes:
        if not isinstance(data, bytes | bytearray | memoryview):
            raise InvalidMessage(f"message data must be bytes, got {type(data).__name__}")
        data = bytes(data)
    key = message.key
    if key is not None and type(key) is not str:
        raise InvalidMessage(f"message key must be str or None, got {type(key).__name__}")
    if message.attributes:
        validate_attributes(message.attributes)
    return data


def build(message: OutboundMessage) -> Any:
    """The client message for ``message``; raises ``TypeError`` for bad data, key or attributes."""
    data = _check(message)
    builder = _pulsar.MessageBuilder()
    builder.content(data)
    if message.key is not None:
        builder.partition_key(message.key)
    if message.attributes:
        builder.properties(dict(message.attributes))
    return builder.build()


# The client message's accessors, looked up once (calling them unbound skips a lookup per call).
_DATA: Final = _pulsar.Message.data
_KEY: Final = _pulsar.Message.partition_key
_PROPERTIES: Final = _pulsar.Message.properties
_PUBLISHED: Final = _pulsar.Message.publish_timestamp
_REDELIVERIES: Final = _pulsar.Message.redelivery_count


class PulsarMessage(LazyMessage):
    """A ``Message`` whose fields other than ``data`` are decoded from the client message on first read.

    Decoding the id, key, properties, publish time and redelivery count costs more than everything
    else a consumer does per message, and many consumers read only ``data``; the values are the same
    either way.
    """

    __slots__ = ()

    decoders = {
        "id": lambda raw: str(raw.message_id().serialize().hex()),
        "key": lambda raw: _KEY(raw) or None,
        "attributes": _PROPERTIES,
        "publish_time": lambda raw: _PUBLISHED(raw) / 1000.0,
        "delivery_attempt": lambda raw: _REDELIVERIES(raw) + 1,
    }


def to_message(raw: Any, acker: Acker, now: float) -> Message:
    """The ``Message`` for one client message received at ``now`` (POSIX seconds)."""
    return PulsarMessage(_DATA(raw), raw, acker, now)


def to_messages(raws: Sequence[Any], acker: Acker, now: float) -> list[Message]:
    """``Message`` objects for client messages received at ``now`` (POSIX seconds)."""
    return [PulsarMessage(_DATA(raw), raw, acker, now) for raw in raws]


def offset_of(message_id: Any) -> int:
    """The ordered integer offset of a client message id (see the module documentation)."""
    return int(
        (message_id.ledger_id() << 40) | (message_id.entry_id() << 16) | (message_id.batch_index() + 1)
    )


def short_topic(full_name: str) -> str:
    """``persistent://public/default/t-partition-2`` -> ``t`` (names outside public/default stay full)."""
    name = _PARTITION_SUFFIX.sub("", full_name)
    return name.removeprefix(DEFAULT_TENANT_NAMESPACE)


def to_records(raws: Sequence[Any], committer: Committer, now: float) -> list[Record]:
    """``Record`` objects for client messages read at ``now``."""
    out: list[Record] = []
    for raw in raws:
        mid = raw.message_id()
        value = None if raw.has_null_value() else raw.data()
        out.append(
            Record(
                short_topic(raw.topic_name()),
                max(mid.partition(), 0),
                offset_of(mid),
                value,
                raw.partition_key() or None,
                raw.properties(),
                raw.publish_timestamp() / 1000.0,
                now,
                raw,
                committer,
            )
        )
    return out


def message_id_text(raw: Any) -> str:
    """The text form of a client message's id (``Message.id``)."""
    return str(raw.message_id().serialize().hex())


def message_id(position: Any) -> Any:
    """A client ``MessageId`` from ``"earliest"``, ``"latest"``, a ``Message.id``, a Message or a Record."""
    if isinstance(position, _pulsar.MessageId):
        return position
    if isinstance(position, Message | Record):
        raw = position.raw
        if raw is None:
            raise ConfigError("this message was not received from Pulsar: it has no message id")
        return raw.message_id()
    if isinstance(position, str):
        if position == "earliest":
            return _pulsar.MessageId.earliest
        if position == "latest":
            return _pulsar.MessageId.latest
        try:
            return _pulsar.MessageId.deserialize(bytes.fromhex(position))
        except (ValueError, _pulsar.PulsarException) as exc:
            raise ConfigError(f"not a Pulsar message id: {position!r}") from exc
    raise ConfigError(
        f"a start position is 'earliest', 'latest', a Message.id, a Message or a Record; got {position!r}"
    )
