"""The protocols a backend implements: publishing, pulling, streaming and receiving.

A backend implements the ones native to its broker; :mod:`broker.adapt` derives the rest.

Conventions shared by every protocol here:

* ``timeout=`` is in seconds; ``None`` waits for as long as it takes. A pull that times out
  raises :class:`~broker.errors.Timeout` (a ``TimeoutError``); a batch pull returns the
  messages that arrived in time instead, possibly none.
* Cancelling the awaiting task cancels the call. Nothing taken from the broker is lost:
  messages a cancelled consumer held but did not hand out are nacked.
* Every resource is an async context manager with an idempotent ``close()``; calls after
  ``close()`` raise :class:`~broker.errors.ClosedError`, and ``async for`` simply ends.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from broker.message import Message, OutboundMessage, Record

__all__ = [
    "BatchHandler",
    "BatchedIterator",
    "BatchedMessageIterator",
    "BatchedMessageStream",
    "BatchedReceiver",
    "Closeable",
    "DrainingReceiver",
    "Handler",
    "MessageIterator",
    "MessageStream",
    "MiddlewarePublisher",
    "Publisher",
    "Receiver",
    "RecordIterator",
    "Send",
    "SendMiddleware",
    "Topic",
    "TransactionalPublisher",
]

#: A receiver's per-message callback. If it raises, the message is nacked (when still unsettled).
Handler = Callable[[Message], Awaitable[None]]
#: A batched receiver's callback; unsettled messages of a batch that raised are nacked.
BatchHandler = Callable[[list[Message]], Awaitable[None]]

#: The rest of the send chain, as seen by a :data:`SendMiddleware`: ``await send(messages)``
#: returns once the broker has ``messages`` (or raises the backend's error).
Send = Callable[[Sequence[OutboundMessage]], Awaitable[None]]

#: An async "around" hook on every send: ``await middleware(topic, messages, send)`` must call
#: ``send`` (once) with the messages to send, typically ``messages`` with attributes added, and
#: may do work before and after it (open and end a span, time the send, count its outcome). It
#: runs after the interceptors; the messages it passes on are not validated again. An error it
#: raises, or lets through from ``send``, fails the publish.
SendMiddleware = Callable[[str, Sequence[OutboundMessage], Send], Awaitable[None]]


@runtime_checkable
class Closeable(Protocol):
    """An async resource with an idempotent ``close()``."""

    async def close(self) -> None:
        """Release the resource; safe to call more than once."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...


@runtime_checkable
class Topic(Protocol):
    """A publishing handle for one topic (subject, queue)."""

    @property
    def name(self) -> str:
        """The topic's name."""

    async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        """Publish one message; returns once the broker has it."""

    async def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        """Publish many messages; returns once the broker has all of them (raises on the first failure)."""


@runtime_checkable
class Publisher(Closeable, Protocol):
    """A factory of :class:`Topic` handles sharing one connection."""

    def topic(self, name: str) -> Topic:
        """The handle for topic ``name`` (cheap; handles are cached)."""


@runtime_checkable
class MiddlewarePublisher(Publisher, Protocol):
    """A publisher that takes send middleware: what ``Backend.publisher()`` hands out.

    :func:`broker.publish_retry.retrying_publish` and the telemetry's publish spans are such
    middleware.
    """

    def wrap_send(self, middleware: SendMiddleware) -> None:
        """Wrap ``middleware`` around every send from now on (inside those added before)."""


@runtime_checkable
class TransactionalPublisher(Publisher, Protocol):
    """A publisher whose messages become visible atomically on commit."""

    async def begin(self) -> None:
        """Start a transaction; publishes until commit/abort belong to it."""

    async def commit(self) -> bool:
        """Commit the transaction; True when committed, False when the broker aborted it."""

    async def abort(self) -> bool:
        """Abort the transaction; its messages are never visible. True when aborted."""


@runtime_checkable
class MessageIterator(Closeable, Protocol):
    """Pull one message at a time (per-message acknowledgement)."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message; raises ``Timeout`` when none arrives within ``timeout`` seconds."""

    def __aiter__(self) -> AsyncIterator[Message]: ...


@runtime_checkable
class BatchedMessageIterator(Closeable, Protocol):
    """Pull messages in batches (each message is still acked on its own)."""

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        """Up to the batch size of messages; what arrived by the timeout, possibly none."""

    def __aiter__(self) -> AsyncIterator[list[Message]]: ...


@runtime_checkable
class RecordIterator(Closeable, Protocol):
    """Pull one record at a time from a partitioned log."""

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; raises ``Timeout`` when none arrives within ``timeout`` seconds."""

    def __aiter__(self) -> AsyncIterator[Record]: ...


@runtime_checkable
class BatchedIterator(Closeable, Protocol):
    """Pull records in batches from a partitioned log."""

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """Up to the batch size of records; what arrived by the timeout, possibly none."""

    def __aiter__(self) -> AsyncIterator[list[Record]]: ...


@runtime_checkable
class MessageStream(Protocol):
    """Push-style consumption as an async iterator; a broker error is raised from the iteration."""

    def stream(self) -> AsyncIterator[Message]:
        """Start streaming; the iteration ends when the stream is closed."""


@runtime_checkable
class BatchedMessageStream(Protocol):
    """Like :class:`MessageStream`, yielding non-empty batches."""

    def batch_stream(self) -> AsyncIterator[list[Message]]:
        """Start streaming batches; the iteration ends when the stream is closed."""


@runtime_checkable
class Receiver(Protocol):
    """Callback-style consumption; the receiver owns the concurrency."""

    async def receive(self, handler: Handler) -> None:
        """Call ``handler`` for every message until cancelled (or a broker error is raised).

        On cancel, messages taken but not handled are nacked.
        """


@runtime_checkable
class DrainingReceiver(Receiver, Protocol):
    """A receiver that stops gracefully: what ``Backend.receiver()`` hands out."""

    def stop(self, drain_timeout: float | None = None) -> None:
        """Stop taking messages; running handlers get ``drain_timeout`` seconds (default: the
        receiver's), then ``receive()`` nacks what is left and returns."""


@runtime_checkable
class BatchedReceiver(Protocol):
    """Callback-style consumption of whole batches."""

    async def receive_batch(self, handler: BatchHandler) -> None:
        """Call ``handler`` for every batch until cancelled (or a broker error is raised)."""
