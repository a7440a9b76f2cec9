"""Typed messages: applications publish and receive their own types on every backend.

Written once above the backends, over the untyped API::

    from broker import typed

    orders = typed.topic(publisher, "orders", Order)          # TypedTopic[Order]
    await orders.publish(Order(id=1, total=9.5), key="c-7")

    async with typed.messages(backend.messages("orders", "billing"), Order) as consumer:
        async for message in consumer:                          # TypedMessage[Order]
            print(message.decoded.total)                        # decoded on first read
            await message.ack()

``type`` is a class (dataclass, pydantic model, msgspec ``Struct``, ``TypedDict``, a plain JSON
type) or a :class:`Binding` (:func:`binding` for a format or a codec, :func:`union` for unions).
Every style has its wrapper: :func:`messages`, :func:`batched_messages`, :func:`records`,
:func:`batched_records`, :func:`receiver`, :func:`batched_receiver`, and :func:`stream`,
:func:`batch_stream`, :func:`record_stream` for the :mod:`broker.adapt` streams (the adapters'
iterators and receivers go to the functions of their kind). :func:`binding_codec` makes a binding
a :class:`~broker.codecs.Codec` for everything that takes one (the processor, the Kafka helpers);
:mod:`broker.typed.cloudevents` carries CloudEvents in binary and structured mode. See
``docs/typed-messages.md``.
"""

from __future__ import annotations

from typing import TypeVar

from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    BatchedReceiver,
    MessageIterator,
    Publisher,
    Receiver,
    RecordIterator,
)
from broker.typed import cloudevents
from broker.typed.binding import Binding, Engine, binding, ensure_binding, union
from broker.typed.codec import BindingCodec, binding_codec
from broker.typed.consuming import (
    DecodeErrorHook,
    TypedBatchedMessages,
    TypedBatchedReceiver,
    TypedBatchedRecords,
    TypedMessages,
    TypedReceiver,
    TypedRecords,
    batch_stream,
    record_stream,
    settle_undecodable,
    stream,
)
from broker.typed.formats import CONTENT_TYPE, CONTENT_TYPES, Format
from broker.typed.publishing import TypedTopic
from broker.typed.received import (
    TypedMessage,
    TypedRecord,
    content_type,
    native_properties,
    tag_message,
    tag_messages,
    tag_record,
    tag_records,
)

__all__ = [
    "CONTENT_TYPE",
    "CONTENT_TYPES",
    "Binding",
    "BindingCodec",
    "DecodeErrorHook",
    "Engine",
    "Format",
    "TypedBatchedMessages",
    "TypedBatchedReceiver",
    "TypedBatchedRecords",
    "TypedMessage",
    "TypedMessages",
    "TypedReceiver",
    "TypedRecord",
    "TypedRecords",
    "TypedTopic",
    "batch_stream",
    "batched_messages",
    "batched_receiver",
    "batched_records",
    "binding",
    "binding_codec",
    "cloudevents",
    "content_type",
    "messages",
    "native_properties",
    "receiver",
    "record_stream",
    "records",
    "settle_undecodable",
    "stream",
    "tag_message",
    "tag_messages",
    "tag_record",
    "tag_records",
    "topic",
    "union",
]

T = TypeVar("T")


def topic(publisher: Publisher, name: str, type: Binding[T] | type[T]) -> TypedTopic[T]:
    """A handle publishing values of ``type`` to topic ``name`` through ``publisher``."""
    bound = ensure_binding(type)
    handle = TypedTopic(publisher.topic(name), bound)
    bindings = getattr(publisher, "bindings", None)
    if isinstance(bindings, dict):
        bindings[name] = bound  # what the publish recorder decodes this topic's payloads with
    return handle


def messages(source: MessageIterator, type: Binding[T] | type[T]) -> TypedMessages[T]:
    """``source`` (``backend.messages(...)`` or any message iterator) handing out typed messages."""
    return TypedMessages(source, ensure_binding(type))


def batched_messages(
    source: BatchedMessageIterator,
    type: Binding[T] | type[T],
) -> TypedBatchedMessages[T]:
    """``source`` (``backend.batched_messages(...)``, ``broker.adapt.batched_messages(...)``) typed."""
    return TypedBatchedMessages(source, ensure_binding(type))


def records(source: RecordIterator, type: Binding[T] | type[T]) -> TypedRecords[T]:
    """``source`` (``backend.records(...)`` or any record iterator) handing out typed records."""
    return TypedRecords(source, ensure_binding(type))


def batched_records(source: BatchedIterator, type: Binding[T] | type[T]) -> TypedBatchedRecords[T]:
    """``source`` (``backend.batched_records(...)``, ``broker.adapt.batched_records(...)``) typed."""
    return TypedBatchedRecords(source, ensure_binding(type))


def receiver(
    source: Receiver,
    type: Binding[T] | type[T],
    *,
    on_decode_error: DecodeErrorHook | None = None,
) -> TypedReceiver[T]:
    """``source`` (``backend.receiver(...)``, ``broker.adapt.receiver(...)``, ``fan_in``) whose
    handler gets typed messages; ``on_decode_error`` settles undecodable ones (default: dead-letter)."""
    return TypedReceiver(source, ensure_binding(type), on_decode_error=on_decode_error)


def batched_receiver(
    source: BatchedReceiver,
    type: Binding[T] | type[T],
    *,
    on_decode_error: DecodeErrorHook | None = None,
) -> TypedBatchedReceiver[T]:
    """``source`` (``broker.adapt.batched_receiver(...)``) whose handler gets lists of typed messages."""
    return TypedBatchedReceiver(source, ensure_binding(type), on_decode_error=on_decode_error)
