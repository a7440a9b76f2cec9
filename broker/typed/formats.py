"""Payload formats of the typed API and the content types that name them.

A typed message travels with a ``content-type`` attribute (:data:`CONTENT_TYPE`; the RabbitMQ and
Service Bus backends carry it in the AMQP ``content-type`` property). On receive, the content type
picks the decoder: :func:`media_type` strips parameters (``; charset=utf-8``) and case, and
:data:`ALIASES` maps the names other producers use onto the two formats here.
"""

from __future__ import annotations

from typing import Final, Literal

__all__ = [
    "ALIASES",
    "CONTENT_TYPE",
    "CONTENT_TYPES",
    "JSON",
    "MSGPACK",
    "Format",
    "format_of",
    "media_type",
]

#: The attribute (header, property) that carries a message's content type on every backend.
CONTENT_TYPE: Final = "content-type"

#: The payload formats of :func:`broker.typed.binding`.
Format = Literal["json", "msgpack"]

#: ``format="json"``.
JSON: Final = "json"
#: ``format="msgpack"`` (MessagePack).
MSGPACK: Final = "msgpack"

#: The content type published for each format.
CONTENT_TYPES: Final[dict[str, str]] = {JSON: "application/json", MSGPACK: "application/msgpack"}

#: Media types understood on receive -> the format they name.
ALIASES: Final[dict[str, str]] = {
    "application/json": JSON,
    "text/json": JSON,
    "application/msgpack": MSGPACK,
    "application/x-msgpack": MSGPACK,
    "application/vnd.msgpack": MSGPACK,
}


def media_type(content_type: str) -> str:
    """``content_type`` without parameters, stripped and lower-cased (``"Application/JSON; q=1"`` ->
    ``"application/json"``)."""
    return content_type.partition(";")[0].strip().lower()


def format_of(content_type: str) -> str | None:
    """The format a content type names (``"json"``, ``"msgpack"``), None when it names neither."""
    return ALIASES.get(media_type(content_type))
