"""SDK objects <-> portable objects, in one place.

Outbound: an :class:`~broker.OutboundMessage` becomes ``produce(topic, data, key, headers=...)``
(key as UTF-8, attributes as headers). Inbound: a confluent-kafka ``Message`` becomes a
:class:`~broker.Record` (key and header values decoded as UTF-8, undecodable bytes kept as
surrogate escapes so nothing is lost; ``publish_time`` is the record timestamp in seconds).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from broker.attributes import validate_attributes
from broker.errors import InvalidMessage
from broker.message import EMPTY_ATTRIBUTES, Committer, OutboundMessage, Record

__all__ = ["check_outbound", "decode_headers", "to_record", "to_records"]


def _check_one(message: Any) -> None:
    if not isinstance(message, OutboundMessage):
        raise InvalidMessage(f"publish takes an OutboundMessage, got {type(message).__name__}")
    if not isinstance(message.data, bytes | bytearray | memoryview):
        raise InvalidMessage(f"message data must be bytes, got {type(message.data).__name__}")
    if message.key is not None and not isinstance(message.key, str):
        raise InvalidMessage(f"message key must be str or None, got {type(message.key).__name__}")
    if message.attributes:
        validate_attributes(message.attributes)


def check_outbound(messages: Sequence[Any]) -> None:
    """Raise ``TypeError`` (``InvalidAttributes`` for attributes) before anything is enqueued.

    Well-formed messages with no attributes take a fast path of three type checks.
    """
    for message in messages:
        if (
            type(message) is not OutboundMessage
            or type(message.data) is not bytes
            or message.attributes
            or (message.key is not None and type(message.key) is not str)
        ):
            _check_one(message)


def decode_headers(headers: Iterable[tuple[str, bytes | None]] | None) -> Mapping[str, str]:
    """Kafka headers as attributes (a repeated header keeps its last value; None reads as '')."""
    if not headers:
        return EMPTY_ATTRIBUTES
    return {
        name: value.decode("utf-8", "surrogateescape") if value is not None else "" for name, value in headers
    }


def to_record(message: Any, committer: Committer, now: float) -> Record:
    """One SDK message as a Record whose ``ack()`` goes to ``committer``."""
    key = message.key()
    ts_type, ts = message.timestamp()
    headers = message.headers()
    return Record(
        message.topic(),
        message.partition(),
        message.offset(),
        message.value(),
        key.decode("utf-8", "surrogateescape") if key is not None else None,
        decode_headers(headers) if headers else EMPTY_ATTRIBUTES,
        ts / 1000.0 if ts_type else None,
        now,
        message,
        committer,
    )


def to_records(
    messages: Sequence[Any],
    committers: Mapping[tuple[str, int], Committer],
    default: Committer,
    now: float,
) -> list[Record]:
    """Many SDK messages as Records (the hot path of every consumer: one lookup per partition run).

    A record's committer is its partition's entry in ``committers``, else ``default``.
    """
    out: list[Record] = []
    append = out.append
    last_topic: str | None = None
    last_partition = -1
    committer: Committer = default
    for message in messages:
        topic = message.topic()
        partition = message.partition()
        if partition != last_partition or topic != last_topic:
            last_topic, last_partition = topic, partition
            committer = committers.get((topic, partition), default)
        key = message.key()
        ts_type, ts = message.timestamp()
        headers = message.headers()
        append(
            Record(
                topic,
                partition,
                message.offset(),
                message.value(),
                key.decode("utf-8", "surrogateescape") if key is not None else None,
                decode_headers(headers) if headers else EMPTY_ATTRIBUTES,
                ts / 1000.0 if ts_type else None,
                now,
                message,
                committer,
            )
        )
    return out
