"""Typed consumers: every consumption style, written once over the untyped ones.

Each wrapper takes what a backend (or :mod:`broker.adapt`) hands out and a :class:`Binding` (or
a class), and yields :class:`TypedMessage` / :class:`TypedRecord` objects around the very
messages and records the source delivered: settlement, closing, timeouts and errors are the
source's. Nothing is decoded until ``decoded`` is read. Entering a wrapper (``async with``)
enters the source and leaving it leaves the source: on several brokers entering is what makes
the subscription exist, so a message published inside the block is delivered. A receiver wrapper
keeps the source's abilities: ``stop()``, ``stopped`` and ``close()`` are the source's, and a
wrapper of a source without them has none either (``hasattr`` says so; ``broker.run`` then
cancels it instead of stopping it).

Undecodable payloads in receivers. When a handler lets the :class:`~broker.errors.DecodeError`
of one of its messages escape (it read ``decoded``), the message is settled as undecodable and
never retried: ``on_decode_error(message, error)`` is called when given (it settles the message);
else, when the receiver has a :class:`~broker.RetryPolicy` with a dead-letter destination, the
policy dead-letters it (a :class:`~broker.DeadLetterTopic` copy with ``x-dead-letter-reason``, or
natively); else it is dead-lettered natively (``Message.dead_letter(reason)``: the broker's
dead-letter queue where one is configured). In a batch handler the rest of the batch is then
nacked and redelivered, so one bad payload costs nothing else.
"""

from __future__ import annotations

import functools
import inspect
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any, Generic, Self, TypeVar

from broker.adapt._common import SourceWrapper
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError, DecodeError
from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    BatchedReceiver,
    MessageIterator,
    Receiver,
    RecordIterator,
)
from broker.message import Message, Record
from broker.retry import Retrier
from broker.typed.binding import Binding, ensure_binding
from broker.typed.received import (
    TypedMessage,
    TypedRecord,
    tag_message,
    tag_messages,
    tag_record,
    tag_records,
)

__all__ = [
    "DecodeErrorHook",
    "TypedBatchedMessages",
    "TypedBatchedReceiver",
    "TypedBatchedRecords",
    "TypedMessages",
    "TypedReceiver",
    "TypedRecords",
    "batch_stream",
    "record_stream",
    "settle_undecodable",
    "stream",
]

T = TypeVar("T")
Out = TypeVar("Out")

log = logging.getLogger("broker.typed")

#: ``await on_decode_error(message, error)``: settle a message whose payload did not decode.
DecodeErrorHook = Callable[[TypedMessage[Any], DecodeError], Awaitable[None]]


#: What a receiver wrapper takes from its source as it is: the stopping and closing abilities.
_KEPT = frozenset({"stop", "stopped", "close", "drain_timeout", "concurrency"})


#: A step run on what a consumer fetched before it is handed out (or given to the handler):
#: a schema binding looks up the writer schemas there, off the event loop.
Prepare = Callable[[list[Any]], Awaitable[None]]


def default_prepare(binding: Binding[Any]) -> Prepare | None:
    """The binding's own step before decoding (its coroutine ``resolve``), or None."""
    resolve = getattr(binding, "resolve", None)
    return resolve if inspect.iscoroutinefunction(resolve) else None


class _Wrapper(SourceWrapper, AsyncResource):
    """An iterator wrapper: ``async with`` entering and leaving the source, and ``close()``."""


class _ReceiverWrapper(SourceWrapper, Generic[T]):
    """A receiver wrapper: ``async with`` entering and leaving ``source``, and the source's
    ``stop()``, ``stopped``, ``close()``, ``drain_timeout`` and ``concurrency`` where it has them."""

    def __init__(
        self,
        source: Any,
        binding: Binding[T],
        *,
        on_decode_error: DecodeErrorHook | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        #: The untyped receiver underneath.
        self.source = source
        #: The binding messages decode with.
        self.binding = binding
        #: Called for a message whose payload did not decode (None: dead-letter it).
        self.on_decode_error = on_decode_error
        #: The step before the handler gets messages (default: the binding's, see :func:`default_prepare`).
        self.prepare = prepare if prepare is not None else default_prepare(binding)

    async def _ready(self, messages: list[TypedMessage[T]]) -> None:
        """Run the :attr:`prepare` step on ``messages`` before the handler gets them."""
        if self.prepare is not None:
            await self.prepare(messages)

    def __getattr__(self, name: str) -> Any:
        if name in _KEPT:
            return getattr(self.source, name)
        raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")


class _Typed(_Wrapper, Generic[T, Out]):
    """An iterator wrapper: what ``source`` fetches, made ready (:meth:`_ready`) and tagged with
    ``binding`` (:meth:`_tag`), handed out as ``Out`` objects; ``close()`` closes the source."""

    __slots__ = ("binding", "prepare", "source")

    def __init__(self, source: Any, binding: Binding[T], prepare: Prepare | None = None) -> None:
        #: The untyped iterator underneath.
        self.source = source
        #: The binding payloads decode with.
        self.binding = binding
        #: The step before fetched items are handed out (default: the binding's, see
        #: :func:`default_prepare`).
        self.prepare = prepare if prepare is not None else default_prepare(binding)

    async def _ready(self, items: list[Any]) -> None:
        """Run the :attr:`prepare` step on fetched ``items`` before they are handed out."""
        if self.prepare is not None:
            await self.prepare(items)

    def _tag(self, items: list[Any]) -> list[Out]:
        """``items`` tagged with the binding, in place."""
        raise NotImplementedError

    async def _hand_out(self, items: list[Any]) -> list[Out]:
        await self._ready(items)
        return self._tag(items)

    async def close(self) -> None:
        """Close the source iterator."""
        await self.source.close()


class _OneByOne(_Typed[T, Out]):
    """A typed iterator over a source's ``next_message()`` / ``next_record()`` (``_pull``)."""

    __slots__ = ()

    async def _pull(self, timeout: float | None) -> Any:
        raise NotImplementedError

    async def _next(self, timeout: float | None) -> Out:
        return (await self._hand_out([await self._pull(timeout)]))[0]

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Out:
        try:
            item = await self._pull(None)
        except ClosedError:
            raise StopAsyncIteration from None
        return (await self._hand_out([item]))[0]


class _Batches(_Typed[T, Out]):
    """A typed iterator over a source's ``next_batch()`` and its ``async for``."""

    __slots__ = ()

    async def next_batch(self, timeout: float | None = None) -> list[Out]:
        """The next batch, possibly empty (see :class:`broker.interfaces.BatchedMessageIterator`)."""
        return await self._hand_out(await self.source.next_batch(timeout))

    async def __aiter__(self) -> AsyncIterator[list[Out]]:
        async for batch in self.source:
            yield await self._hand_out(batch)


class TypedMessages(_OneByOne[T, TypedMessage[T]]):
    """A :class:`~broker.interfaces.MessageIterator` handing out :class:`TypedMessage` objects."""

    __slots__ = ()

    def __init__(self, source: MessageIterator, binding: Binding[T], prepare: Prepare | None = None) -> None:
        super().__init__(source, binding, prepare)

    async def _pull(self, timeout: float | None) -> Message:
        message: Message = await self.source.next_message(timeout)
        return message

    def _tag(self, items: list[Any]) -> list[TypedMessage[T]]:
        return tag_messages(items, self.binding)

    async def next_message(self, timeout: float | None = None) -> TypedMessage[T]:
        """The next message (see :meth:`broker.interfaces.MessageIterator.next_message`)."""
        return await self._next(timeout)


class TypedBatchedMessages(_Batches[T, TypedMessage[T]]):
    """A batched message iterator handing out lists of :class:`TypedMessage` objects."""

    __slots__ = ()

    def __init__(
        self, source: BatchedMessageIterator, binding: Binding[T], prepare: Prepare | None = None
    ) -> None:
        super().__init__(source, binding, prepare)

    def _tag(self, items: list[Any]) -> list[TypedMessage[T]]:
        return tag_messages(items, self.binding)


class TypedRecords(_OneByOne[T, TypedRecord[T]]):
    """A :class:`~broker.interfaces.RecordIterator` handing out :class:`TypedRecord` objects."""

    __slots__ = ()

    def __init__(self, source: RecordIterator, binding: Binding[T], prepare: Prepare | None = None) -> None:
        super().__init__(source, binding, prepare)

    async def _pull(self, timeout: float | None) -> Record:
        record: Record = await self.source.next_record(timeout)
        return record

    def _tag(self, items: list[Any]) -> list[TypedRecord[T]]:
        return tag_records(items, self.binding)

    async def next_record(self, timeout: float | None = None) -> TypedRecord[T]:
        """The next record (see :meth:`broker.interfaces.RecordIterator.next_record`)."""
        return await self._next(timeout)


class TypedBatchedRecords(_Batches[T, TypedRecord[T]]):
    """A batched record iterator handing out lists of :class:`TypedRecord` objects."""

    __slots__ = ()

    def __init__(self, source: BatchedIterator, binding: Binding[T], prepare: Prepare | None = None) -> None:
        super().__init__(source, binding, prepare)

    def _tag(self, items: list[Any]) -> list[TypedRecord[T]]:
        return tag_records(items, self.binding)


async def stream(
    source: AsyncIterator[Message], type: Binding[T] | type[T]
) -> AsyncIterator[TypedMessage[T]]:
    """A message stream (``broker.adapt.message_stream(...)``, a backend's ``stream()``) as typed messages."""
    binding = ensure_binding(type)
    async for message in source:
        yield tag_message(message, binding)


async def batch_stream(
    source: AsyncIterator[list[Message]], type: Binding[T] | type[T]
) -> AsyncIterator[list[TypedMessage[T]]]:
    """A batched message stream (``broker.adapt.batch_stream(...)``) as lists of typed messages."""
    binding = ensure_binding(type)
    async for batch in source:
        yield tag_messages(batch, binding)


async def record_stream(
    source: AsyncIterator[Record], type: Binding[T] | type[T]
) -> AsyncIterator[TypedRecord[T]]:
    """A record stream (``broker.adapt.record_stream(...)``) as typed records."""
    binding = ensure_binding(type)
    async for record in source:
        yield tag_record(record, binding)


def _retrier_of(source: Any) -> Retrier | None:
    """The retry policy of a ``broker.adapt`` receiver, when it has a dead-letter destination."""
    retrier = getattr(source, "retrier", None)
    if isinstance(retrier, Retrier) and retrier.policy.dead_letter is not None:
        return retrier
    return None


async def settle_undecodable(
    message: TypedMessage[Any],
    error: DecodeError,
    *,
    hook: DecodeErrorHook | None = None,
    retrier: Retrier | None = None,
) -> None:
    """Settle a message whose payload did not decode: ``hook``, else ``retrier``'s dead-letter
    destination, else the broker's own dead-letter (``Message.dead_letter(reason)``).

    A message its handler already settled is left alone. Raises ``error`` when the message could
    not be settled (the receiver then nacks it: redelivered, never lost).
    """
    if message.settled:
        return
    if hook is not None:
        await hook(message, error)
        return
    if retrier is not None:
        if await retrier.dead_letter(message, error):
            return
        raise error
    reason = f"non-retryable DecodeError: {error}"[:1024]
    log.error("dead-lettering message %s: %s", message.id, reason)
    await message.dead_letter(reason)


class TypedReceiver(_ReceiverWrapper[T]):
    """A :class:`~broker.interfaces.Receiver` whose handler gets :class:`TypedMessage` objects.

    Wraps any receiver (``backend.receiver(...)``, ``broker.adapt.receiver(...)``, ``fan_in``);
    the source's concurrency, retry policy and draining apply. See the module docstring for what
    happens to a payload that does not decode.
    """

    def __init__(
        self,
        source: Receiver,
        binding: Binding[T],
        *,
        on_decode_error: DecodeErrorHook | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        super().__init__(source, binding, on_decode_error=on_decode_error, prepare=prepare)

    async def receive(self, handler: Callable[[TypedMessage[T]], Awaitable[None]]) -> None:
        """Call ``handler`` for every message until cancelled or stopped (as the source does)."""
        binding, hook, retrier = self.binding, self.on_decode_error, _retrier_of(self.source)

        async def call(message: Message) -> None:
            typed = tag_message(message, binding)
            try:
                await self._ready([typed])
                await handler(typed)
            except DecodeError as exc:
                if exc.received is not message:
                    raise
                await settle_undecodable(typed, exc, hook=hook, retrier=retrier)

        await self.source.receive(functools.update_wrapper(call, handler))  # logs name the user's handler


class TypedBatchedReceiver(_ReceiverWrapper[T]):
    """A :class:`~broker.interfaces.BatchedReceiver` whose handler gets lists of :class:`TypedMessage`.

    When the handler lets a message's ``DecodeError`` escape, that message is settled as
    undecodable and the batch's other unsettled messages fail as usual (nacked, redelivered).
    """

    def __init__(
        self,
        source: BatchedReceiver,
        binding: Binding[T],
        *,
        on_decode_error: DecodeErrorHook | None = None,
        prepare: Prepare | None = None,
    ) -> None:
        super().__init__(source, binding, on_decode_error=on_decode_error, prepare=prepare)

    async def receive_batch(self, handler: Callable[[list[TypedMessage[T]]], Awaitable[None]]) -> None:
        """Call ``handler`` for every non-empty batch until cancelled or stopped."""
        binding, hook, retrier = self.binding, self.on_decode_error, _retrier_of(self.source)

        async def call(batch: list[Message]) -> None:
            typed = tag_messages(batch, binding)
            try:
                await self._ready(typed)
                await handler(typed)
            except DecodeError as exc:
                bad = _position(batch, exc.received)
                if bad is None:
                    raise
                await settle_undecodable(typed[bad], exc, hook=hook, retrier=retrier)
                if any(not m.settled for m in batch):
                    raise _BatchStopped(f"the batch handler stopped at an undecodable message: {exc}") from (
                        exc
                    )

        await self.source.receive_batch(functools.update_wrapper(call, handler))


class _BatchStopped(RuntimeError):
    """The rest of a batch after an undecodable message: retried as any failed batch."""


def _position(batch: Sequence[Message], received: Any) -> int | None:
    for index, message in enumerate(batch):
        if message is received:
            return index
    return None
