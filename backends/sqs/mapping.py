"""The portable model in SQS/SNS terms, in one place: messages to and from SQS messages.

================================  ============================================================
portable                          SQS / SNS
================================  ============================================================
``data``                          the message body: as is when it is text SQS can carry (UTF-8
                                  of the characters XML allows), else base64 with the attribute
                                  ``pb-body=base64``; an empty payload is the body ``-`` with
                                  ``pb-body=empty`` (SQS and SNS refuse an empty body)
``key``                           the attribute ``pb-key`` on standard topics and queues; the
                                  ``MessageGroupId`` on FIFO ones (a message without a key gets
                                  the group :data:`DEFAULT_GROUP`, read back as no key)
``attributes``                    message attributes of type ``String``; an empty value travels
                                  as the custom type ``String.empty`` (AWS refuses empty values)
================================  ============================================================

The ``pb-`` attributes count against the limit of 10 message attributes; a message that needs
more is refused with :class:`~broker.errors.InvalidAttributes` before it is sent (CloudEvents in
binary mode then fit only with few extensions: use structured mode, where they travel in the body).
Attribute names are SQS's: ``A-Z a-z 0-9 _ - .``, at most 256 characters, not starting with
``AWS.`` or ``Amazon.``, no ``..``, no leading or trailing ``.``.

``Message.id`` is the SQS ``MessageId`` (the SNS one in SNS mode with raw delivery differs: SQS
gives each queue's copy an id of its own), ``publish_time`` the ``SentTimestamp``,
``delivery_attempt`` the ``ApproximateReceiveCount`` and ``raw`` the SQS message as received.
"""

from __future__ import annotations

import base64
import re
from collections.abc import Mapping
from typing import Any

from broker import Message, OutboundMessage
from broker.backends.sqs.settings import MAX_ATTRIBUTES
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker
from broker.errors import InvalidAttributes

__all__ = [
    "BODY_ATTRIBUTE",
    "DEFAULT_GROUP",
    "KEY_ATTRIBUTE",
    "check_attribute_name",
    "encoded_size",
    "to_attributes",
    "to_body",
    "to_message",
]

#: The attribute that holds the key on standard topics and queues.
KEY_ATTRIBUTE = "pb-key"
#: The attribute that says how the body is encoded (absent: the payload is the body's UTF-8).
BODY_ATTRIBUTE = "pb-body"
#: The ``MessageGroupId`` of a message without a key on a FIFO topic or queue.
DEFAULT_GROUP = "polybroker-default"
_EMPTY_TYPE = "String.empty"

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
# characters SQS refuses in a body or attribute value (outside XML 1.0's Char production)
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def check_attribute_name(name: str) -> None:
    """``InvalidAttributes`` unless SQS takes ``name`` as a message attribute name."""
    lowered = name.lower()
    if (
        not _NAME.match(name)
        or lowered.startswith(("aws.", "amazon."))
        or ".." in name
        or name.startswith(".")
        or name.endswith(".")
    ):
        raise InvalidAttributes(
            f"SQS message attribute names are 1-256 of A-Z a-z 0-9 _ - . (no '..', no leading or "
            f"trailing '.', not AWS./Amazon.), got {name!r}"
        )


def _text_value(value: str, name: str) -> str:
    if _NOT_XML.search(value):
        raise InvalidAttributes(f"attribute {name!r} holds characters SQS does not carry (outside XML 1.0)")
    return value


def to_body(data: bytes) -> tuple[str, str | None]:
    """The body of a payload and its ``pb-body`` attribute value (None: the body is the payload)."""
    if not data:
        return "-", "empty"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        text = None
    if text is not None and not _NOT_XML.search(text):
        return text, None
    return base64.b64encode(data).decode("ascii"), "base64"


def to_attributes(message: OutboundMessage, fifo: bool, encoding: str | None) -> dict[str, dict[str, str]]:
    """The ``MessageAttributes`` of ``message`` (``InvalidAttributes`` past the limit of 10)."""
    out: dict[str, dict[str, str]] = {}
    for name, value in message.attributes.items():
        check_attribute_name(name)
        if name in (KEY_ATTRIBUTE, BODY_ATTRIBUTE):
            raise InvalidAttributes(f"attribute {name!r} is reserved by the SQS backend")
        if value:
            out[name] = {"DataType": "String", "StringValue": _text_value(value, name)}
        else:
            out[name] = {"DataType": _EMPTY_TYPE, "StringValue": "-"}
    if message.key is not None and not fifo:
        if message.key:
            out[KEY_ATTRIBUTE] = {"DataType": "String", "StringValue": _text_value(message.key, "key")}
        else:
            out[KEY_ATTRIBUTE] = {"DataType": _EMPTY_TYPE, "StringValue": "-"}
    if encoding is not None:
        out[BODY_ATTRIBUTE] = {"DataType": "String", "StringValue": encoding}
    if len(out) > MAX_ATTRIBUTES:
        raise InvalidAttributes(
            f"SQS and SNS carry at most {MAX_ATTRIBUTES} message attributes, and this message needs "
            f"{len(out)} (its {len(message.attributes)} attributes"
            + (", the key" if KEY_ATTRIBUTE in out else "")
            + (", the body encoding" if BODY_ATTRIBUTE in out else "")
            + "); CloudEvents: use structured mode"
        )
    return out


def encoded_size(body: str, attributes: Mapping[str, Mapping[str, str]]) -> int:
    """The size AWS counts against its limit: the body plus every attribute's name, type and value."""
    size = len(body.encode())
    for name, value in attributes.items():
        size += len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
    return size


def group_id(message: OutboundMessage) -> str:
    """The ``MessageGroupId`` of ``message`` on a FIFO topic or queue."""
    if message.key:
        return message.key
    return DEFAULT_GROUP


def to_message(
    queue: str, sqs_message: Mapping[str, Any], acker: Acker, received: float, fifo: bool
) -> Message:
    """The :class:`~broker.message.Message` of a message received from ``queue``."""
    raw_attributes: Mapping[str, Any] = sqs_message.get("MessageAttributes") or {}
    system: Mapping[str, str] = sqs_message.get("Attributes") or {}
    attributes: dict[str, str] = {}
    key: str | None = None
    encoding: str | None = None
    for name, value in raw_attributes.items():
        data_type = str(value.get("DataType", "String"))
        if data_type == _EMPTY_TYPE:
            text = ""
        elif "StringValue" in value:
            text = str(value["StringValue"])
        else:
            binary = value.get("BinaryValue", b"")
            text = base64.b64encode(binary).decode() if isinstance(binary, bytes) else str(binary)
        if name == KEY_ATTRIBUTE:
            key = text
        elif name == BODY_ATTRIBUTE:
            encoding = text
        else:
            attributes[name] = text
    if fifo:
        group = system.get("MessageGroupId")
        key = None if group in (None, DEFAULT_GROUP) else group
    body = str(sqs_message.get("Body", ""))
    if encoding == "empty":
        data = b""
    elif encoding == "base64":
        data = base64.b64decode(body)
    else:
        data = body.encode()
    sent = system.get("SentTimestamp")
    count = system.get("ApproximateReceiveCount")
    return Message(
        id=str(sqs_message.get("MessageId", "")),
        data=data,
        key=key,
        attributes=attributes or EMPTY_ATTRIBUTES,
        publish_time=int(sent) / 1000.0 if sent else None,
        ingestion_time=received,
        delivery_attempt=int(count) if count else 1,
        raw=dict(sqs_message),
        acker=acker,
    )
