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
                                  the group :data:`DEFAULT_GROUP`, read back as no key); the
                                  ``MessageDeduplicationId`` is :func:`deduplication_id`
``attributes``                    message attributes of type ``String``, one each, when they fit
                                  (see below); an empty value travels as the custom type
                                  ``String.empty`` (AWS refuses empty values)
================================  ============================================================

SQS and SNS carry at most 10 message attributes, and the ``pb-key`` and ``pb-body`` attributes
count against them. When a message's attributes do not fit one SQS attribute each (more than
the limit leaves, or a name SQS refuses: only ``A-Z a-z 0-9 _ - .``, at most 256 characters, not
``AWS.``/``Amazon.``, no ``..``, no leading or trailing ``.``; or a value with characters outside
XML 1.0), all of them travel as one JSON object in the attribute ``pb-attrs`` (non-ASCII escaped),
and come back unchanged; nothing is refused, but a raw SQS client then sees ``pb-attrs``.
CloudEvents in binary mode (``ce-*`` attributes plus the content type) stay native up to that
limit; structured mode carries the event's attributes in the body.

``Message.id`` is the SQS ``MessageId`` (the SNS one in SNS mode with raw delivery differs: SQS
gives each queue's copy an id of its own), ``publish_time`` the ``SentTimestamp``,
``delivery_attempt`` the ``ApproximateReceiveCount`` and ``raw`` the SQS message as received.
"""

from __future__ import annotations

import base64
import hashlib
import json
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
    "PACKED_ATTRIBUTE",
    "deduplication_id",
    "encoded_size",
    "to_attributes",
    "to_body",
    "to_message",
]

#: The attribute that holds the key on standard topics and queues.
KEY_ATTRIBUTE = "pb-key"
#: The attribute that says how the body is encoded (absent: the payload is the body's UTF-8).
BODY_ATTRIBUTE = "pb-body"
#: The attribute that holds every attribute as one JSON object when they do not fit one SQS
#: attribute each.
PACKED_ATTRIBUTE = "pb-attrs"
#: The ``MessageGroupId`` of a message without a key on a FIFO topic or queue.
DEFAULT_GROUP = "polybroker-default"
_EMPTY_TYPE = "String.empty"

_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,256}$")
# characters SQS refuses in a body or attribute value (outside XML 1.0's Char production)
_NOT_XML = re.compile("[^\t\n\r\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


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


def _native_name(name: str) -> bool:
    lowered = name.lower()
    return bool(
        _NAME.match(name)
        and not lowered.startswith(("aws.", "amazon."))
        and ".." not in name
        and not name.startswith(".")
        and not name.endswith(".")
        and name not in (KEY_ATTRIBUTE, BODY_ATTRIBUTE, PACKED_ATTRIBUTE)
    )


def _string(value: str) -> dict[str, str]:
    if value:
        return {"DataType": "String", "StringValue": value}
    return {"DataType": _EMPTY_TYPE, "StringValue": "-"}


def to_attributes(message: OutboundMessage, fifo: bool, encoding: str | None) -> dict[str, dict[str, str]]:
    """The ``MessageAttributes`` of ``message``: one SQS attribute per attribute when they fit (at
    most 10 in all, names and values SQS takes), else all of them packed in ``pb-attrs``."""
    out: dict[str, dict[str, str]] = {}
    if message.key is not None and not fifo:
        out[KEY_ATTRIBUTE] = _string(_text_value(message.key, "key"))
    if encoding is not None:
        out[BODY_ATTRIBUTE] = {"DataType": "String", "StringValue": encoding}
    attributes = message.attributes
    if len(out) + len(attributes) <= MAX_ATTRIBUTES and all(
        _native_name(name) and not _NOT_XML.search(value) for name, value in attributes.items()
    ):
        for name, value in attributes.items():
            out[name] = _string(value)
    elif attributes:
        # JSON with every non-ASCII character escaped: text SQS carries whatever the attributes hold
        packed = json.dumps(dict(attributes), ensure_ascii=True, separators=(",", ":"))
        out[PACKED_ATTRIBUTE] = {"DataType": "String", "StringValue": packed}
    return out


def encoded_size(body: str, attributes: Mapping[str, Mapping[str, str]]) -> int:
    """The size AWS counts against its limit: the body plus every attribute's name, type and value."""
    size = len(body.encode())
    for name, value in attributes.items():
        size += len(name.encode()) + len(value["DataType"].encode()) + len(value["StringValue"].encode())
    return size


def deduplication_id(message: OutboundMessage) -> str:
    """The ``MessageDeduplicationId`` of ``message`` on a FIFO topic or queue: the SHA-256 of its
    key, payload and attributes. The same message sent again (a retried publish, a batch sent
    again whole) has the same id, and AWS stores it once within its five-minute window; messages
    that differ in any of these are distinct (add an attribute, e.g. an id, to send equal ones)."""
    digest = hashlib.sha256()
    header = json.dumps([message.key, sorted(message.attributes.items())], ensure_ascii=True)
    digest.update(header.encode())
    digest.update(b"\0")
    digest.update(message.data)
    return digest.hexdigest()


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
        elif name == PACKED_ATTRIBUTE:
            try:
                unpacked = json.loads(text)
            except ValueError:
                unpacked = None
            if isinstance(unpacked, dict):
                attributes.update({str(k): str(v) for k, v in unpacked.items()})
            else:  # another client's attribute of that name
                attributes[name] = text
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
        raw=sqs_message if type(sqs_message) is dict else dict(sqs_message),  # no copy of a received one
        acker=acker,
    )
