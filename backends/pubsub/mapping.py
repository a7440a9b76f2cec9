"""SDK objects <-> :class:`~broker.message.Message`, and outbound checks, in one place.

Outbound: ``data`` must be bytes, ``attributes`` ``str -> str``; ``key`` becomes the Pub/Sub
ordering key, which needs message ordering on (a key without it is an error, never dropped).
Inbound: message id, data, attributes, the ordering key as ``key`` (empty: None), publish time,
delivery attempt (Pub/Sub counts it only on subscriptions with a dead-letter policy; None
otherwise) and the time of receipt. ``Message.raw`` is the SDK's object: a streaming-pull
``pubsub_v1.subscriber.message.Message``, or a pulled ``ReceivedMessage`` protobuf.

Pub/Sub refuses a message with neither data nor attributes; such a message is sent with the
attribute ``polybroker-empty: 1``, which receiving removes again (from empty messages only).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from broker.attributes import validate_attributes
from broker.errors import ConfigError, InvalidMessage
from broker.message import EMPTY_ATTRIBUTES, Acker, Message, OutboundMessage

__all__ = [
    "EMPTY_MARKER",
    "RESERVED_ATTRIBUTE_NAMES",
    "check_outbound",
    "from_received",
    "from_streamed",
    "outbound_size",
    "wire_attributes",
]

#: Attribute names the threaded client's ``publish(topic, data, ordering_key, retry, timeout, **attrs)``
#: cannot take as keywords; messages carrying them are published with a direct RPC instead.
RESERVED_ATTRIBUTE_NAMES: Final = frozenset({"topic", "data", "ordering_key", "retry", "timeout"})
#: The attribute that lets a message with no data and no attributes through (Pub/Sub refuses those).
EMPTY_MARKER: Final = "polybroker-empty"
_EMPTY_MARKER_ATTRIBUTES: Final = {EMPTY_MARKER: "1"}


def wire_attributes(message: OutboundMessage) -> Mapping[str, str]:
    """The attributes to send for ``message`` (the empty-message marker when it has nothing)."""
    if message.attributes:
        return message.attributes
    return EMPTY_ATTRIBUTES if message.data else _EMPTY_MARKER_ATTRIBUTES


def check_outbound(message: Any, ordering: bool) -> None:
    """Raise ``TypeError`` / ``InvalidAttributes`` / ``ConfigError`` unless ``message`` can be published."""
    if not isinstance(message, OutboundMessage):
        raise InvalidMessage(f"publish takes an OutboundMessage, got {type(message).__name__}")
    if type(message.data) is not bytes:
        if not isinstance(message.data, bytes | bytearray | memoryview):
            raise InvalidMessage(f"message data must be bytes, got {type(message.data).__name__}")
    if message.attributes:
        validate_attributes(message.attributes)
    key = message.key
    if key is not None:
        if type(key) is not str:
            raise InvalidMessage(f"message key must be str or None, got {type(key).__name__}")
        if key and not ordering:
            raise ConfigError(
                f"message key {key!r} needs message ordering: Pub/Sub carries keys as ordering keys, "
                "which a publisher without ordering rejects. Connect with message_ordering=true "
                "(pubsub://PROJECT?message_ordering=true), or publish without a key"
            )


def outbound_size(message: OutboundMessage) -> int:
    """Approximate bytes ``message`` takes in a publish request."""
    size = len(message.data) + (len(message.key) if message.key else 0)
    if message.attributes:
        size += sum(len(k) + len(v) for k, v in message.attributes.items())
    return size


def _attributes(attributes: Any, data: bytes) -> Mapping[str, str]:
    if not attributes:
        return EMPTY_ATTRIBUTES
    out = dict(attributes)
    if not data and EMPTY_MARKER in out:
        del out[EMPTY_MARKER]
        return out or EMPTY_ATTRIBUTES
    return out


def from_streamed(sdk: Any, acker: Acker) -> Message:
    """A Message for a streaming-pull delivery (``pubsub_v1.subscriber.message.Message``)."""
    data = sdk.data
    return Message(
        sdk.message_id,
        data,
        sdk.ordering_key or None,
        _attributes(sdk.attributes, data),
        sdk.publish_time.timestamp(),
        time.time(),
        sdk.delivery_attempt,
        sdk,
        acker,
    )


def from_received(received: Any, acker: Acker, now: float) -> Message:
    """A Message for a pulled ``ReceivedMessage`` protobuf, received at ``now`` (POSIX seconds)."""
    pb = received.message
    stamp = pb.publish_time
    data = pb.data
    return Message(
        pb.message_id,
        data,
        pb.ordering_key or None,
        _attributes(pb.attributes, data),
        stamp.seconds + stamp.nanos / 1e9,
        now,
        received.delivery_attempt or None,
        received,
        acker,
    )
