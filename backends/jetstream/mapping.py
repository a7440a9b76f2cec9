"""nats-py messages <-> :class:`~broker.message.Message` / :class:`~broker.message.Record`, in one place.

Key and attributes travel as NATS headers:

* the key goes in the ``Polybroker-Key`` header (lib-brokers drops the key; here it round-trips);
* each attribute is a header of the same name and value;
* what a NATS header cannot carry exactly - a name that is not an HTTP token, a value with a
  line break or leading/trailing white space, or a name we reserve - travels JSON-encoded in the
  ``Polybroker-Encoded`` header instead, so every ``str -> str`` mapping round-trips;
* the de-duplication id: the attribute named by ``msg_id_attribute`` (default ``Nats-Msg-Id``) is
  sent as the ``Nats-Msg-Id`` header and comes back under the same attribute name.

Headers set by other NATS clients come back as attributes, unchanged.

A delivered message's metadata is read from its ``$JS.ACK...`` reply subject: ``Message.id`` is
the stream sequence (the same on every redelivery), ``delivery_attempt`` the delivery count,
``publish_time`` the time the stream stored the message.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from nats.aio.msg import Msg

from broker import Message, Record
from broker.backends.jetstream.settings import MSG_ID_HEADER
from broker.driver.acking import EMPTY_ATTRIBUTES, Acker, Committer, LazyMessage
from broker.errors import InvalidAttributes, ReceiveError

__all__ = [
    "ENCODED_HEADER",
    "KEY_HEADER",
    "Delivery",
    "JetStreamMessage",
    "decode_headers",
    "encode_headers",
    "parse_reply",
    "to_messages",
    "to_records",
]

#: Header carrying the message key.
KEY_HEADER: Final = "Polybroker-Key"
#: Header carrying, JSON-encoded, what plain headers cannot: ``{"k": key, "a": {name: value}}``.
ENCODED_HEADER: Final = "Polybroker-Encoded"

_RESERVED = frozenset({KEY_HEADER, ENCODED_HEADER})
_TOKEN = re.compile(r"[!#$%&'*+\-.^_`|~0-9A-Za-z]+")


def _plain_value(value: str) -> bool:
    return "\r" not in value and "\n" not in value and value == value.strip()


def encode_headers(
    key: str | None, attributes: Mapping[str, str], msg_id_attribute: str = MSG_ID_HEADER
) -> dict[str, str] | None:
    """The NATS headers carrying ``key`` and ``attributes`` (None when there is nothing to carry)."""
    if not attributes:
        if key is None:
            return None
        if _plain_value(key):
            return {KEY_HEADER: key}
        return {ENCODED_HEADER: json.dumps({"k": key})}
    headers: dict[str, str] = {}
    encoded: dict[str, Any] = {}
    if key is not None:
        if _plain_value(key):
            headers[KEY_HEADER] = key
        else:
            encoded["k"] = key
    renamed = msg_id_attribute != MSG_ID_HEADER
    odd: dict[str, str] = {}
    for name, value in attributes.items():
        if renamed:
            if name == msg_id_attribute:
                if not _plain_value(value):
                    raise InvalidAttributes(f"the de-duplication id {value!r} cannot be a NATS header value")
                headers[MSG_ID_HEADER] = value
                continue
            if name == MSG_ID_HEADER:
                raise InvalidAttributes(
                    f"give the de-duplication id in the {msg_id_attribute!r} attribute, not {MSG_ID_HEADER!r}"
                )
        elif name == MSG_ID_HEADER and not _plain_value(value):
            raise InvalidAttributes(f"the de-duplication id {value!r} cannot be a NATS header value")
        if name in _RESERVED or not _TOKEN.fullmatch(name) or not _plain_value(value):
            odd[name] = value
        else:
            headers[name] = value
    if odd:
        encoded["a"] = odd
    if encoded:
        headers[ENCODED_HEADER] = json.dumps(encoded)
    return headers


def decode_headers(
    headers: Mapping[str, str], msg_id_attribute: str = MSG_ID_HEADER
) -> tuple[str | None, Mapping[str, str]]:
    """The key and attributes carried by a message's NATS headers."""
    attributes = dict(headers)
    key = attributes.pop(KEY_HEADER, None)
    encoded = attributes.pop(ENCODED_HEADER, None)
    if encoded is not None:
        try:
            extra = json.loads(encoded)
        except ValueError:
            attributes[ENCODED_HEADER] = encoded  # not ours after all: keep it as it came
        else:
            if isinstance(extra, dict):
                if "k" in extra:
                    key = str(extra["k"])
                odd = extra.get("a")
                if isinstance(odd, dict):
                    attributes.update({str(k): str(v) for k, v in odd.items()})
    if msg_id_attribute != MSG_ID_HEADER and MSG_ID_HEADER in attributes:
        attributes[msg_id_attribute] = attributes.pop(MSG_ID_HEADER)
    return key, (attributes or EMPTY_ATTRIBUTES)


@dataclass(slots=True)
class Delivery:
    """The metadata of one JetStream delivery, parsed from its ``$JS.ACK`` reply subject."""

    stream: str
    consumer: str
    delivered: int
    stream_seq: int
    timestamp: float
    pending: int


def parse_reply(reply: str) -> Delivery:
    """The delivery metadata in a JetStream ack subject (``ReceiveError`` if it is not one)."""
    tokens = reply.split(".")
    count = len(tokens)
    if count >= 2 and tokens[0] == "$JS" and tokens[1] == "ACK":
        if count == 9:  # $JS.ACK.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>
            return Delivery(
                tokens[2], tokens[3], int(tokens[4]), int(tokens[5]), int(tokens[7]) / 1e9, int(tokens[8])
            )
        if count >= 11:  # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>...
            return Delivery(
                tokens[4], tokens[5], int(tokens[6]), int(tokens[7]), int(tokens[9]) / 1e9, int(tokens[10])
            )
    raise ReceiveError(f"not a JetStream delivery (reply subject {reply!r})")


def _reply_token(reply: str, short: int, long: int) -> str:
    """Token ``short`` of a 9-token ``$JS.ACK`` subject, or ``long`` of the 11+-token (domain) form."""
    tokens = reply.split(".")
    return tokens[short] if len(tokens) == 9 else tokens[long]


class JetStreamMessage(LazyMessage):
    """A ``Message`` whose id, delivery attempt and publish time are parsed from the ``$JS.ACK``
    reply subject when first read (many consumers read only ``data``; the values are the same).
    """

    __slots__ = ()

    decoders = {
        "id": lambda raw: _reply_token(raw.reply, 5, 7),
        "delivery_attempt": lambda raw: int(_reply_token(raw.reply, 4, 6)),
        "publish_time": lambda raw: int(_reply_token(raw.reply, 7, 9)) / 1e9,
    }


def to_messages(
    msgs: list[Msg], acker: Acker, now: float, msg_id_attribute: str = MSG_ID_HEADER
) -> list[Message]:
    """Messages for nats-py deliveries of a pull consumer, settled through ``acker``."""
    out: list[Message] = []
    append = out.append
    for msg in msgs:
        reply = msg.reply
        dots = reply.count(".")  # checked up front: the fields parsed later cannot fail
        if not ((dots == 8 or dots >= 10) and reply.startswith("$JS.ACK.")):
            raise ReceiveError(f"not a JetStream delivery (reply subject {reply!r})")
        message = JetStreamMessage(msg.data, msg, acker, now)
        headers = msg.headers
        if headers:
            message.key, message.attributes = decode_headers(headers, msg_id_attribute)
        else:
            message.key = None
            message.attributes = EMPTY_ATTRIBUTES
        append(message)
    return out


def to_records(
    msgs: list[Msg], committer: Committer, now: float, msg_id_attribute: str = MSG_ID_HEADER
) -> list[Record]:
    """Records (partition 0, offset = stream sequence) for nats-py deliveries."""
    out: list[Record] = []
    for msg in msgs:
        delivery = parse_reply(msg.reply)
        headers = msg.headers
        if headers:
            key, attributes = decode_headers(headers, msg_id_attribute)
        else:
            key, attributes = None, EMPTY_ATTRIBUTES
        out.append(
            Record(
                msg.subject,
                0,
                delivery.stream_seq,
                msg.data,
                key,
                attributes,
                delivery.timestamp,
                now,
                msg,
                committer,
            )
        )
    return out
