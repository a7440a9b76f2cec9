"""Consumers of registry-framed values that never make the event loop wait on the registry.

Each wrapper is the :mod:`broker.typed` wrapper of its kind (the same typed messages and records,
the same settlement and decode-error handling), with one step added: before handing out what it
fetched, it looks up the writer schemas it has not seen, in a worker thread
(:meth:`SchemaBinding.resolve`). ``decoded`` is then pure CPU. A schema that cannot be had fails
the decoding of its messages only: :class:`~broker.errors.DecodeError` for an unknown id (a
receiver dead-letters the message), the registry's retryable error when it cannot be reached.
"""

from __future__ import annotations

from typing import Any, TypeVar

from broker.schemas.binding import SchemaBinding
from broker.typed.consuming import (
    TypedBatchedMessages,
    TypedBatchedReceiver,
    TypedBatchedRecords,
    TypedMessages,
    TypedReceiver,
    TypedRecords,
)
from broker.typed.received import TypedMessage

__all__ = [
    "SchemaBatchedMessages",
    "SchemaBatchedReceiver",
    "SchemaBatchedRecords",
    "SchemaMessages",
    "SchemaReceiver",
    "SchemaRecords",
]

T = TypeVar("T")


class _Resolving:
    """What the schema iterators add to the typed ones: a key binding, and writer schemas looked
    up (off the loop) for what was fetched before it is handed out."""

    binding: Any
    key_binding: SchemaBinding[Any] | None

    def __init__(
        self, source: Any, binding: SchemaBinding[Any], key: SchemaBinding[Any] | None = None
    ) -> None:
        super().__init__(source, binding)  # type: ignore[call-arg]  # the typed iterator's
        #: The key binding whose schemas are resolved too (Kafka), or None.
        self.key_binding = key

    async def _ready(self, items: list[Any]) -> None:
        await self.binding.resolve(items)
        if self.key_binding is not None:
            await self.key_binding.resolve(items, keys=True)


class SchemaMessages(_Resolving, TypedMessages[T]):
    """``typed.messages`` resolving writer schemas off the loop before handing messages out."""


class SchemaRecords(_Resolving, TypedRecords[T]):
    """``typed.records`` resolving writer schemas off the loop before handing records out."""


class SchemaBatchedMessages(_Resolving, TypedBatchedMessages[T]):
    """``typed.batched_messages`` resolving writer schemas off the loop per batch."""


class SchemaBatchedRecords(_Resolving, TypedBatchedRecords[T]):
    """``typed.batched_records`` resolving writer schemas off the loop per batch."""


class SchemaReceiver(TypedReceiver[T]):
    """``typed.receiver`` whose handler gets messages with their schemas looked up."""

    async def _ready(self, messages: list[TypedMessage[T]]) -> None:
        await self.binding.resolve(messages)  # type: ignore[attr-defined]  # a SchemaBinding


class SchemaBatchedReceiver(TypedBatchedReceiver[T]):
    """``typed.batched_receiver`` whose handler gets batches with their schemas looked up."""

    async def _ready(self, messages: list[TypedMessage[T]]) -> None:
        await self.binding.resolve(messages)  # type: ignore[attr-defined]  # a SchemaBinding
