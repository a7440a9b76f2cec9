"""Validation of messages to publish, shared by every backend.

Backends keep a fast path of a few ``type()`` checks for the common well-formed message and
call :func:`check_outbound` for anything else, so every backend reports bad input with the
same typed errors.
"""

from __future__ import annotations

from typing import Any

from broker.driver.attributes import validate_attributes
from broker.errors import InvalidMessage
from broker.message import OutboundMessage

__all__ = ["check_batch", "check_outbound", "is_plain"]


def is_plain(message: Any) -> bool:
    """True for a well-formed message needing no more checks: bytes data, str/None key, no attributes."""
    return (
        type(message) is OutboundMessage
        and type(message.data) is bytes
        and not message.attributes
        and (message.key is None or type(message.key) is str)
    )


def check_outbound(message: Any) -> None:
    """Raise :class:`~broker.errors.InvalidMessage` (or its subclass ``InvalidAttributes``) for bad input.

    Accepted: an :class:`~broker.OutboundMessage` whose data is ``bytes``, ``bytearray`` or
    ``memoryview``, whose key is ``str`` or None, and whose attributes map ``str`` to ``str``.
    """
    if not isinstance(message, OutboundMessage):
        raise InvalidMessage(f"publish takes an OutboundMessage, got {type(message).__name__}")
    if not isinstance(message.data, bytes | bytearray | memoryview):
        raise InvalidMessage(
            f"message data must be bytes, got {type(message.data).__name__}"
            + (" (encode text first, e.g. text.encode())" if isinstance(message.data, str) else "")
        )
    if message.key is not None and not isinstance(message.key, str):
        raise InvalidMessage(f"message key must be str or None, got {type(message.key).__name__}")
    if message.attributes:
        validate_attributes(message.attributes)


def check_batch(messages: Any) -> None:
    """:func:`check_outbound` for every message of a batch, with a fast path for well-formed ones.

    A message with bytes data and a str (or no) key costs a few ``type()`` checks; its attributes
    are validated once per mapping object: a batch whose messages share one attributes mapping
    (the usual way to tag a batch) validates it once. The walk is synchronous, so a mapping
    validated earlier in the walk cannot have changed since.
    """
    outbound = OutboundMessage
    valid: Any = None
    for message in messages:
        if (
            type(message) is not outbound
            or type(message.data) is not bytes
            or (message.key is not None and type(message.key) is not str)
        ):
            check_outbound(message)
            continue
        attributes = message.attributes
        if attributes and attributes is not valid:
            validate_attributes(attributes)
            valid = attributes
