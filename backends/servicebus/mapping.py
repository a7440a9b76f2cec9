"""OutboundMessage -> ServiceBusMessage and ServiceBusReceivedMessage -> Message, in one place.

Outbound: ``data`` is the body (one data section); ``key`` becomes the partition key or the
session id (``key_to``); ``attributes`` become application properties (portable ``str -> str``),
except ``content-type``, which is the AMQP ``content-type`` property (``ServiceBusMessage.content_type``)
and comes back as that attribute.

Inbound: ``id`` is the message id (the sequence number when there is none), ``key`` the partition
key or session id, ``attributes`` the application properties with keys and values as ``str``
(the SDK hands strings over as bytes; other AMQP types are converted with ``str()``),
``publish_time`` the enqueued time, ``ingestion_time`` the time of receipt, ``delivery_attempt``
the SDK's delivery count + 1. A copy scheduled by a delayed nack carries the attempts so far in
the reserved application property ``polybroker-delivery-attempt``, which is not shown as an
attribute.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Final

from azure.servicebus import ServiceBusMessage, ServiceBusReceivedMessage
from azure.servicebus.amqp import AmqpMessageBodyType

from broker import Message, OutboundMessage
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker
from broker.driver.attributes import validate_attributes
from broker.errors import InvalidAttributes, InvalidMessage

__all__ = [
    "ATTEMPT_PROPERTY",
    "CONTENT_TYPE_ATTRIBUTE",
    "dead_letter_copy",
    "redelivery_copy",
    "to_message",
    "to_sdk",
]

#: Application property carrying the delivery attempts of the message a delayed-nack copy replaces.
ATTEMPT_PROPERTY: Final = "polybroker-delivery-attempt"
#: The attribute carried in the message's AMQP ``content-type`` property, not an application property.
CONTENT_TYPE_ATTRIBUTE: Final = "content-type"


def check(message: OutboundMessage) -> None:
    """Raise ``TypeError`` (``InvalidAttributes``) for a message that cannot be published."""
    if not isinstance(message, OutboundMessage):
        raise InvalidMessage(f"publish takes an OutboundMessage, got {type(message).__name__}")
    if not isinstance(message.data, bytes | bytearray | memoryview):
        raise InvalidMessage(f"message data must be bytes, got {type(message.data).__name__}")
    if message.key is not None and not isinstance(message.key, str):
        raise InvalidMessage(f"message key must be str or None, got {type(message.key).__name__}")
    if message.attributes:
        validate_attributes(message.attributes)
        if ATTEMPT_PROPERTY in message.attributes:
            raise InvalidAttributes(
                f"the attribute name {ATTEMPT_PROPERTY!r} is reserved by the servicebus backend"
            )


def to_sdk(message: OutboundMessage, key_to: str, id_attribute: str = "MessageId") -> ServiceBusMessage:
    """The SDK message for ``message`` (checked first); attribute ``id_attribute`` becomes its MessageId."""
    check(message)
    data = message.data
    key = message.key or None
    properties: dict[str | bytes, Any] | None = None
    message_id = None
    content_type = None
    if message.attributes:
        properties = {}
        properties.update(message.attributes)
        message_id = properties.pop(id_attribute, None)
        content_type = properties.pop(CONTENT_TYPE_ATTRIBUTE, None)
    return ServiceBusMessage(
        data if type(data) is bytes else bytes(data),
        application_properties=properties or None,
        partition_key=key if key_to == "partition_key" else None,
        session_id=key if key_to == "session_id" else None,
        message_id=message_id,
        content_type=content_type,
    )


def _text(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def _payload(raw: ServiceBusReceivedMessage) -> bytes:
    body = raw.body
    if raw.body_type == AmqpMessageBodyType.DATA:
        return b"".join(body)
    if isinstance(body, bytes):
        return body
    if isinstance(body, str):
        return body.encode()
    return _text(body).encode()


def native_properties(raw: ServiceBusReceivedMessage) -> dict[str, Any]:
    """The application properties of ``raw`` with the types AMQP gave them (int, float, bool, UUID,
    str, ...). As the SDK decodes them: a timestamp is milliseconds since the epoch, and strings and
    binaries both come as bytes, so bytes that are UTF-8 are given as ``str``. Names as text; the
    backend's own delivery counter left out."""
    properties = raw.raw_amqp_message.application_properties or {}
    out = {_text(name): _string(value) for name, value in properties.items()}
    out.pop(ATTEMPT_PROPERTY, None)
    return out


def _string(value: Any) -> Any:
    # The SDK's AMQP decoder gives strings, symbols and binaries alike as bytes: UTF-8 is text.
    if isinstance(value, bytes):
        try:
            return value.decode()
        except UnicodeDecodeError:
            return value
    return value


def to_message(raw: ServiceBusReceivedMessage, acker: Acker, key_to: str) -> Message:
    """The ``Message`` for a received SDK message, settled through ``acker``."""
    amqp = raw.raw_amqp_message
    properties = amqp.application_properties
    attributes: Mapping[str, str] = EMPTY_ATTRIBUTES
    carried = 0
    if properties:
        converted = {_text(k): _text(v) for k, v in properties.items()}
        if ATTEMPT_PROPERTY in converted:
            carried_text = converted.pop(ATTEMPT_PROPERTY)
            carried = int(carried_text) if carried_text.isdigit() else 0
        attributes = converted
    content_type = raw.content_type
    if content_type:
        attributes = {**attributes, CONTENT_TYPE_ATTRIBUTE: content_type}
    key = raw.partition_key if key_to == "partition_key" else raw.session_id
    message_id = raw.message_id
    enqueued = raw.enqueued_time_utc
    return Message(
        str(message_id) if message_id is not None else str(raw.sequence_number),
        _payload(raw),
        key or None,
        attributes,
        enqueued.timestamp() if enqueued is not None else None,
        time.time(),
        carried + (raw.delivery_count or 0) + 1,
        raw,
        acker,
    )


def dead_letter_copy(message: Message, reason: str, description: str) -> ServiceBusMessage:
    """A copy of a received message for a dead-letter queue or topic, with the reason as attributes.

    The attributes are Service Bus's own dead-letter properties (``DeadLetterReason``,
    ``DeadLetterErrorDescription``) plus ``DeadLetterSource``, the entity it came from.
    """
    copy = redelivery_copy(message)
    properties = copy.application_properties or {}
    properties.pop(ATTEMPT_PROPERTY, None)
    properties["DeadLetterReason"] = reason
    properties["DeadLetterErrorDescription"] = description
    copy.application_properties = properties
    return copy


def redelivery_copy(message: Message) -> ServiceBusMessage:
    """A copy of a received message to schedule for a delayed nack, carrying its delivery attempts."""
    raw: ServiceBusReceivedMessage = message.raw
    properties: dict[str | bytes, Any] = {}
    for key, value in (raw.application_properties or {}).items():
        name = _text(key)
        if name != ATTEMPT_PROPERTY:
            properties[name] = _text(value) if isinstance(value, bytes) else value
    properties[ATTEMPT_PROPERTY] = str(message.delivery_attempt or 1)
    return ServiceBusMessage(
        message.data,
        application_properties=properties,
        message_id=message.id,
        partition_key=raw.partition_key,
        session_id=raw.session_id,
        content_type=raw.content_type,
        correlation_id=raw.correlation_id,
        subject=raw.subject,
        to=raw.to,
        reply_to=raw.reply_to,
        reply_to_session_id=raw.reply_to_session_id,
        time_to_live=raw.time_to_live,
    )
