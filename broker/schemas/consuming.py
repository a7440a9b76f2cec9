"""Consumers of registry-framed values that never make the event loop wait on the registry.

Each wrapper is the :mod:`broker.typed` wrapper of its kind (the same typed messages and records,
the same settlement and decode-error handling), with one step added: before handing out what it
fetched, it looks up the writer schemas it has not seen, in a worker thread
(:meth:`SchemaBinding.resolve`). ``decoded`` is then pure CPU. A schema that cannot be had fails
the decoding of its messages only: :class:`~broker.errors.DecodeError` for an unknown id (a
receiver dead-letters the message), the registry's retryable error when it cannot be reached.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from broker.errors import ClosedError
from broker.schemas.binding import SchemaBinding
from broker.typed.consuming import (
    TypedBatchedMessages,
    TypedBatchedReceiver,
    TypedBatchedRecords,
    TypedMessages,
    TypedReceiver,
    TypedRecords,
)
from broker.typed.received import (
    TypedMessage,
    TypedRecord,
    tag_message,
    tag_messages,
    tag_record,
    tag_records,
)

__all__ = [
    "SchemaBatchedMessages",
    "SchemaBatchedReceiver",
    "SchemaBatchedRecords",
    "SchemaMessages",
    "SchemaReceiver",
    "SchemaRecords",
]

T = TypeVar("T")


async def _resolve(binding: Any, items: list[Any], key: SchemaBinding[Any] | None) -> None:
    await binding.resolve(items)
    if key is not None:
        await key.resolve(items, keys=True)


class SchemaMessages(TypedMessages[T]):
    """``typed.messages`` resolving writer schemas off the loop before handing messages out."""

    __slots__ = ("key_binding",)

    def __init__(self, source: Any, binding: SchemaBinding[T], key: SchemaBinding[Any] | None = None) -> None:
        super().__init__(source, binding)
        #: The key binding whose schemas are resolved too (Kafka), or None.
        self.key_binding = key

    async def next_message(self, timeout: float | None = None) -> TypedMessage[T]:
        """The next message, its schema looked up (see :class:`broker.interfaces.MessageIterator`)."""
        message = await self.source.next_message(timeout)
        await _resolve(self.binding, [message], self.key_binding)
        return tag_message(message, self.binding)

    async def __anext__(self) -> TypedMessage[T]:
        try:
            message = await self.source.next_message()
        except ClosedError:
            raise StopAsyncIteration from None
        await _resolve(self.binding, [message], self.key_binding)
        return tag_message(message, self.binding)


class SchemaRecords(TypedRecords[T]):
    """``typed.records`` resolving writer schemas off the loop before handing records out."""

    __slots__ = ("key_binding",)

    def __init__(self, source: Any, binding: SchemaBinding[T], key: SchemaBinding[Any] | None = None) -> None:
        super().__init__(source, binding)
        #: The key binding whose schemas are resolved too (Kafka), or None.
        self.key_binding = key

    async def next_record(self, timeout: float | None = None) -> TypedRecord[T]:
        """The next record, its schema looked up (see :class:`broker.interfaces.RecordIterator`)."""
        record = await self.source.next_record(timeout)
        await _resolve(self.binding, [record], self.key_binding)
        return tag_record(record, self.binding)

    async def __anext__(self) -> TypedRecord[T]:
        try:
            record = await self.source.next_record()
        except ClosedError:
            raise StopAsyncIteration from None
        await _resolve(self.binding, [record], self.key_binding)
        return tag_record(record, self.binding)


class SchemaBatchedMessages(TypedBatchedMessages[T]):
    """``typed.batched_messages`` resolving writer schemas off the loop per batch."""

    __slots__ = ("key_binding",)

    def __init__(self, source: Any, binding: SchemaBinding[T], key: SchemaBinding[Any] | None = None) -> None:
        super().__init__(source, binding)
        #: The key binding whose schemas are resolved too (Kafka), or None.
        self.key_binding = key

    async def next_batch(self, timeout: float | None = None) -> list[TypedMessage[T]]:
        """The next batch, possibly empty, its schemas looked up."""
        batch = await self.source.next_batch(timeout)
        await _resolve(self.binding, batch, self.key_binding)
        return tag_messages(batch, self.binding)

    async def __aiter__(self) -> AsyncIterator[list[TypedMessage[T]]]:
        binding = self.binding
        async for batch in self.source:
            await _resolve(binding, batch, self.key_binding)
            yield tag_messages(batch, binding)


class SchemaBatchedRecords(TypedBatchedRecords[T]):
    """``typed.batched_records`` resolving writer schemas off the loop per batch."""

    __slots__ = ("key_binding",)

    def __init__(self, source: Any, binding: SchemaBinding[T], key: SchemaBinding[Any] | None = None) -> None:
        super().__init__(source, binding)
        #: The key binding whose schemas are resolved too (Kafka), or None.
        self.key_binding = key

    async def next_batch(self, timeout: float | None = None) -> list[TypedRecord[T]]:
        """The next batch, possibly empty, its schemas looked up."""
        batch = await self.source.next_batch(timeout)
        await _resolve(self.binding, batch, self.key_binding)
        return tag_records(batch, self.binding)

    async def __aiter__(self) -> AsyncIterator[list[TypedRecord[T]]]:
        binding = self.binding
        async for batch in self.source:
            await _resolve(binding, batch, self.key_binding)
            yield tag_records(batch, binding)


class SchemaReceiver(TypedReceiver[T]):
    """``typed.receiver`` whose handler gets messages with their schemas looked up."""

    async def receive(self, handler: Callable[[TypedMessage[T]], Awaitable[None]]) -> None:
        """Call ``handler`` for every message until cancelled or stopped."""
        binding = self.binding

        async def resolved(message: TypedMessage[T]) -> None:
            await binding.resolve([message])  # type: ignore[attr-defined]
            await handler(message)

        await super().receive(functools.update_wrapper(resolved, handler))  # logs name the user's handler


class SchemaBatchedReceiver(TypedBatchedReceiver[T]):
    """``typed.batched_receiver`` whose handler gets batches with their schemas looked up."""

    async def receive_batch(self, handler: Callable[[list[TypedMessage[T]]], Awaitable[None]]) -> None:
        """Call ``handler`` for every non-empty batch until cancelled or stopped."""
        binding = self.binding

        async def resolved(batch: list[TypedMessage[T]]) -> None:
            await binding.resolve(batch)  # type: ignore[attr-defined]
            await handler(batch)

        await super().receive_batch(functools.update_wrapper(resolved, handler))
