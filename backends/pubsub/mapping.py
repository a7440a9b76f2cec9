"""SDK objects <-> :class:`~broker.message.Message`, and outbound checks, in one place.

Outbound: ``data`` must be bytes, ``attributes`` ``str -> str``. ``key`` travels two ways:

* with ``message_ordering`` on, a non-empty key is the Pub/Sub ordering key (per-key order);
* otherwise (the default) the key is the attribute ``polybroker-key`` (:data:`KEY_ATTRIBUTE`),
  so keys travel on every subscription, with no order among them. An empty key ``""`` always
  goes as that attribute (an empty ordering key means "no key").

The attribute name is reserved: publishing it as a user attribute raises ``InvalidAttributes``.
Inbound: message id, data, attributes (without the reserved ones), the key (the ordering key,
else the ``polybroker-key`` attribute, else None), publish time, delivery attempt (Pub/Sub
counts it only on subscriptions with a dead-letter policy; None otherwise) and the time of
receipt. ``Message.raw`` is the SDK's object: a streaming-pull
``pubsub_v1.subscriber.message.Message``, or a pulled ``ReceivedMessage`` protobuf.

Pub/Sub refuses a message with neither data nor attributes; such a message is sent with the
attribute ``polybroker-empty: 1``, which receiving removes again (from empty messages only).
Attribute values are strings (Pub/Sub's own type) and pass unchanged both ways.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from broker import Message, OutboundMessage
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker
from broker.errors import InvalidAttributes

__all__ = [
    "EMPTY_MARKER",
    "KEY_ATTRIBUTE",
    "RESERVED_ATTRIBUTE_NAMES",
    "check_reserved",
    "from_received",
    "from_streamed",
    "ordering_key",
    "outbound_size",
    "raw_ordering_key",
    "wire_attributes",
]

#: Attribute names the threaded client's ``publish(topic, data, ordering_key, retry, timeout, **attrs)``
#: cannot take as keywords; messages carrying them are published with a direct RPC instead.
RESERVED_ATTRIBUTE_NAMES: Final = frozenset({"topic", "data", "ordering_key", "retry", "timeout"})
#: The attribute that lets a message with no data and no attributes through (Pub/Sub refuses those).
EMPTY_MARKER: Final = "polybroker-empty"
#: The attribute that carries ``OutboundMessage.key`` when it is not an ordering key.
KEY_ATTRIBUTE: Final = "polybroker-key"
_EMPTY_MARKER_ATTRIBUTES: Final = {EMPTY_MARKER: "1"}


def ordering_key(message: OutboundMessage, ordering: bool) -> str:
    """The ordering key to publish ``message`` with ("" for none)."""
    return (message.key or "") if ordering else ""


def wire_attributes(message: OutboundMessage, ordering: bool) -> Mapping[str, str]:
    """The attributes to send for ``message``: its own, the key unless it is the ordering key, or
    the empty-message marker when there is nothing else."""
    key = message.key
    if key is not None and (not ordering or not key):
        if message.attributes:
            return {**message.attributes, KEY_ATTRIBUTE: key}
        return {KEY_ATTRIBUTE: key}
    if message.attributes:
        return message.attributes
    return EMPTY_ATTRIBUTES if message.data else _EMPTY_MARKER_ATTRIBUTES


def check_reserved(message: OutboundMessage) -> None:
    """Raise ``InvalidAttributes`` when a (validated) message uses the attribute that carries keys."""
    if message.attributes and KEY_ATTRIBUTE in message.attributes:
        raise InvalidAttributes(
            f"the attribute name {KEY_ATTRIBUTE!r} is reserved: it carries OutboundMessage.key on Pub/Sub"
        )


def outbound_size(message: OutboundMessage) -> int:
    """Approximate bytes ``message`` takes in a publish request."""
    size = len(message.data)
    if message.key is not None:
        size += len(message.key) + len(KEY_ATTRIBUTE)
    if message.attributes:
        size += sum(len(k) + len(v) for k, v in message.attributes.items())
    return size


def _key_and_attributes(
    attributes: Any, data: bytes, ordering_key: str
) -> tuple[str | None, Mapping[str, str]]:
    """The message's key and its attributes without the reserved ones."""
    if not attributes:
        return ordering_key or None, EMPTY_ATTRIBUTES
    out = dict(attributes)
    key = out.pop(KEY_ATTRIBUTE, None)
    if not data and EMPTY_MARKER in out:
        del out[EMPTY_MARKER]
    return ordering_key or key, out or EMPTY_ATTRIBUTES


def _to_message(
    pb: Any, publish_time: float, now: float, attempt: int | None, raw: Any, acker: Acker
) -> Message:
    """A Message for ``pb``, a ``PubsubMessage`` protobuf or an object with its fields."""
    data = pb.data
    key, attributes = _key_and_attributes(pb.attributes, data, pb.ordering_key)
    return Message(pb.message_id, data, key, attributes, publish_time, now, attempt, raw, acker)


def from_streamed(sdk: Any, acker: Acker) -> Message:
    """A Message for a streaming-pull delivery (``pubsub_v1.subscriber.message.Message``)."""
    return _to_message(sdk, sdk.publish_time.timestamp(), time.time(), sdk.delivery_attempt, sdk, acker)


def from_received(received: Any, acker: Acker, now: float) -> Message:
    """A Message for a pulled ``ReceivedMessage`` protobuf, received at ``now`` (POSIX seconds)."""
    pb = received.message
    stamp = pb.publish_time
    attempt = received.delivery_attempt or None
    return _to_message(pb, stamp.seconds + stamp.nanos / 1e9, now, attempt, received, acker)


def raw_ordering_key(message: Message) -> str:
    """The ordering key ``message`` (received here) was published with ("" for none)."""
    raw = message.raw
    pb = getattr(raw, "message", None)  # a pulled ReceivedMessage; else a streamed SDK message
    return str((pb if pb is not None else raw).ordering_key)
