"""Confluent Schema Registry formats: Avro, Protobuf and JSON Schema values on every backend.

Behind the ``schemas`` extra (``pip install 'polybroker[schemas]'``), which installs confluent-kafka:
the registry client and its serializers ship inside it, so applications on other backends get it
too. ``import broker`` never imports it; this package does, when a binding or registry is made.
::

    from broker import schemas

    registry = schemas.Registry("https://sr.example:8081", basic_auth=("key", "secret"))
    orders = schemas.avro(registry, ORDER_SCHEMA)                      # SchemaBinding[dict]
    handle = schemas.topic(backend.publisher(), "orders", orders)
    await handle.publish({"id": 1, "total": 9.5}, key="customer-7")

    async with schemas.records(backend.records("orders", "billing"), orders) as records:
        async for record in records:
            print(record.decoded["total"])

A :class:`SchemaBinding` is a :class:`broker.typed.Binding` (and a :class:`broker.codecs.Codec`):
the bytes are confluent-kafka's own (the 5-byte header: magic byte 0 and the schema id; or the
schema GUID in a ``__value_schema_id`` header), the subject name strategies are ``topic``,
``record`` and ``topic_record``, schemas are registered automatically or looked up
(``auto_register=False``), or the subject's latest version is used (``use_latest=True``). Keys
framed by the registry are a Kafka option (``key=`` of :func:`topic`); other backends refuse them
with :class:`~broker.errors.NotSupported`. Registry failures are :mod:`broker.errors` classes
(:mod:`broker.schemas.errors`). See ``docs/schemas.md``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypedDict, TypeVar

from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    BatchedReceiver,
    MessageIterator,
    Publisher,
    Receiver,
    RecordIterator,
)
from broker.schemas.binding import Field, IdPlacement, SchemaBinding
from broker.schemas.consuming import resolver
from broker.schemas.errors import IncompatibleSchema, InvalidSchema, SchemaNotFound
from broker.schemas.formats import CONTENT_TYPES, SchemaFormat, Strategy
from broker.schemas.framing import KEY_SCHEMA_ID, VALUE_SCHEMA_ID
from broker.schemas.publishing import SchemaTopic
from broker.schemas.registry import Registry
from broker.typed.consuming import (
    DecodeErrorHook,
    TypedBatchedMessages,
    TypedBatchedReceiver,
    TypedBatchedRecords,
    TypedMessages,
    TypedReceiver,
    TypedRecords,
)

if TYPE_CHECKING:
    from typing_extensions import Unpack

__all__ = [
    "CONTENT_TYPES",
    "KEY_SCHEMA_ID",
    "VALUE_SCHEMA_ID",
    "Field",
    "IdPlacement",
    "IncompatibleSchema",
    "InvalidSchema",
    "Registry",
    "SchemaBinding",
    "SchemaFormat",
    "SchemaNotFound",
    "SchemaTopic",
    "Strategy",
    "avro",
    "batched_messages",
    "batched_receiver",
    "batched_records",
    "decoded_key",
    "json_schema",
    "messages",
    "protobuf",
    "receiver",
    "records",
    "topic",
]

T = TypeVar("T")
M = TypeVar("M")


class _Settings(TypedDict, total=False):
    """The settings every format's binding takes (see :func:`avro`; defaults: :class:`SchemaBinding`)."""

    subject_strategy: Strategy
    auto_register: bool
    use_latest: bool
    normalize: bool
    id_in: IdPlacement
    field: Field
    topic: str | None


class _DictSettings(_Settings, total=False):
    """The settings of the formats whose values are dicts: converters to and from your type."""

    to_dict: Callable[[Any], Any] | None
    from_dict: Callable[[Any], Any] | None


def avro(registry: Registry, schema: str, **settings: Unpack[_DictSettings]) -> SchemaBinding[Any]:
    """An Avro binding of ``schema`` (its JSON text): values are dicts (or ``to_dict`` /
    ``from_dict`` convert your type). Payloads written with another version of the schema are
    read into this one (Avro's resolution rules).

    ``subject_strategy``: ``"topic"`` (``{topic}-value``, the default), ``"record"`` (the record's
    full name) or ``"topic_record"``; ``auto_register``: register the schema when its subject lacks
    it (the default; else look it up: :class:`SchemaNotFound` when absent); ``use_latest``: write
    with the subject's latest version (needs ``auto_register=False``); ``normalize``: normalize
    before registering; ``id_in``: the schema id in the ``"payload"`` prefix (the default) or a
    ``"header"`` (the GUID); ``field``: ``"value"`` (the default) or ``"key"`` (a key binding, Kafka
    only); ``topic``: the topic :meth:`~SchemaBinding.encode` names to the strategy when used as a
    plain codec.
    """
    return SchemaBinding(registry, "avro", schema, **settings)


def protobuf(registry: Registry, message_type: type[M], **settings: Unpack[_Settings]) -> SchemaBinding[M]:
    """A Protobuf binding of ``message_type`` (a generated message class, nested types included:
    the payload carries its message indexes). Payloads written with another version of the message
    parse into this one (Protobuf's rules). The settings are those of :func:`avro`."""
    return SchemaBinding(registry, "protobuf", message_type, **settings)


def json_schema(registry: Registry, schema: str, **settings: Unpack[_DictSettings]) -> SchemaBinding[Any]:
    """A JSON Schema binding of ``schema`` (its JSON text; the record name of the ``record``
    strategies is its ``title``): values are validated against it on both sides. The settings are
    those of :func:`avro`."""
    return SchemaBinding(registry, "json", schema, **settings)


def topic(
    publisher: Publisher, name: str, binding: SchemaBinding[T], *, key: SchemaBinding[Any] | None = None
) -> SchemaTopic[T]:
    """A handle publishing ``binding``'s values to topic ``name``; ``key``: a key binding (Kafka)."""
    return SchemaTopic(publisher, name, binding, key=key)


def messages(
    source: MessageIterator, binding: SchemaBinding[T], *, key: SchemaBinding[Any] | None = None
) -> TypedMessages[T]:
    """``source`` handing out typed messages whose schemas were looked up off the loop."""
    return TypedMessages(source, binding, resolver(binding, key))


def batched_messages(
    source: BatchedMessageIterator, binding: SchemaBinding[T], *, key: SchemaBinding[Any] | None = None
) -> TypedBatchedMessages[T]:
    """``source`` handing out batches of typed messages whose schemas were looked up off the loop."""
    return TypedBatchedMessages(source, binding, resolver(binding, key))


def records(
    source: RecordIterator, binding: SchemaBinding[T], *, key: SchemaBinding[Any] | None = None
) -> TypedRecords[T]:
    """``source`` handing out typed records whose schemas were looked up off the loop."""
    return TypedRecords(source, binding, resolver(binding, key))


def batched_records(
    source: BatchedIterator, binding: SchemaBinding[T], *, key: SchemaBinding[Any] | None = None
) -> TypedBatchedRecords[T]:
    """``source`` handing out batches of typed records whose schemas were looked up off the loop."""
    return TypedBatchedRecords(source, binding, resolver(binding, key))


def receiver(
    source: Receiver, binding: SchemaBinding[T], *, on_decode_error: DecodeErrorHook | None = None
) -> TypedReceiver[T]:
    """``source``'s handler gets typed messages whose schemas were looked up off the loop."""
    return TypedReceiver(source, binding, on_decode_error=on_decode_error, prepare=resolver(binding))


def batched_receiver(
    source: BatchedReceiver, binding: SchemaBinding[T], *, on_decode_error: DecodeErrorHook | None = None
) -> TypedBatchedReceiver[T]:
    """``source``'s batch handler gets typed messages whose schemas were looked up off the loop."""
    return TypedBatchedReceiver(source, binding, on_decode_error=on_decode_error, prepare=resolver(binding))


def decoded_key(received: Any, binding: SchemaBinding[T]) -> T | None:
    """The registry-framed key of ``received`` (a Kafka record or message) as ``binding`` decodes it."""
    return binding.decode_key(received)


#: Consumer classes of earlier releases: ``schemas.messages(...)`` and the others now return the
#: :mod:`broker.typed` consumers with the schema lookup as their ``prepare`` step.
_MOVED = {
    "SchemaMessages": TypedMessages,
    "SchemaBatchedMessages": TypedBatchedMessages,
    "SchemaRecords": TypedRecords,
    "SchemaBatchedRecords": TypedBatchedRecords,
    "SchemaReceiver": TypedReceiver,
    "SchemaBatchedReceiver": TypedBatchedReceiver,
}


def __getattr__(name: str) -> Any:
    moved = _MOVED.get(name)
    if moved is not None:
        warnings.warn(
            f"broker.schemas.{name} is broker.typed.{moved.__name__} now (the schema consumers return "
            "it, with the schema lookup as its prepare step); the old name goes in 0.3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        return moved
    raise AttributeError(f"module 'broker.schemas' has no attribute {name!r}")
