"""A subscriber: a handler, where it reads from, and the pipeline each delivery runs through.

The pipeline of one delivery: with telemetry on, the tracing and metrics stage
(:meth:`broker.telemetry.core.ConsumerTelemetry.run`: the process span continuing the publisher's
trace, current for all that follows, the handler duration, the settle outcome on the span) around
[the app's and the subscriber's middleware, outermost first, around [decode the payload
(:mod:`broker.typed`) → call the handler with its bound parameters (in a worker thread for a plain
``def``; through FastDepends when it has ``Depends()`` parameters), its lease kept] → publish the
return value to the output topic → settle by the ack policy]. Failures are the
receiver's: a :class:`~broker.RetryPolicy` (nack with backoff, dead-letter after
``max_attempts`` or a non-retryable error) or, without one, the receiver's bounded nack
backoff. A payload that does not decode is never given to the handler (see
:class:`Undecodable`).
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from broker import adapt
from broker.adapt.receivers import register_failure_rule
from broker.app.lease import DEFAULT_MAX_LEASE, LeaseKeeper
from broker.app.parameters import Signature
from broker.app.partitioned import DEFAULT_MAX_IN_FLIGHT, PartitionedReceiver
from broker.backoff import DEFAULT_BACKOFF
from broker.errors import ConfigError, DecodeError
from broker.interfaces import Publisher
from broker.message import _PENDING, Message, OutboundMessage, Record
from broker.retry import DeadLetterTopic, Retrier, RetryPolicy
from broker.settle import ack_all, handler_name
from broker.typed import Binding, TypedTopic
from broker.typed import topic as typed_topic
from broker.typed.binding import ensure_binding
from broker.typed.formats import CONTENT_TYPE as _CONTENT_TYPE

__all__ = ["AckPolicy", "Middleware", "Output", "Subscriber", "Undecodable"]

log = logging.getLogger("broker.app")

#: ``"auto"``: ack on return, nack (or dead-letter) by the retry policy on an exception;
#: ``"manual"``: the handler settles its messages.
AckPolicy = Literal["auto", "manual"]

#: ``async def middleware(delivery, call_next) -> result``: runs around the decode and the handler
#: of each delivery (a :class:`~broker.Message`, or a batch subscriber's ``list[Message]``).
#: ``await call_next(delivery)`` runs the rest and returns the handler's return value, which the
#: middleware returns (or replaces) to be published; an exception goes to the retry policy; not
#: calling ``call_next`` skips the handler (the message is then acked under ``ack="auto"``).
Middleware = Callable[[Any, Callable[[Any], Awaitable[Any]]], Awaitable[Any]]


class Undecodable:
    """Settles a message whose payload does not decode (it is never given to the handler).

    With a retry policy that has a dead-letter destination, it is dead-lettered at once as the
    policy dead-letters (a :class:`~broker.DeadLetterTopic` copy, or natively). Otherwise, or when
    dead-lettering fails, it is logged at ERROR with its message id and nacked with the longest
    delay of the backoff (the policy's, else the default 10 s), so a poison message costs one
    delivery per that delay and is never dropped.
    """

    def __init__(self, retry: RetryPolicy | None, topic: str, subscription: str) -> None:
        self.retry = retry
        self.topic = topic
        self.subscription = subscription
        self.retrier: Retrier | None = None
        self.delay = (retry.backoff if retry is not None else DEFAULT_BACKOFF).maximum

    def bind(self, publisher: Publisher | None) -> None:
        """Bind the policy's dead-letter destination (``publisher`` serves a topic naming none)."""
        if self.retry is not None and self.retry.dead_letter is not None:
            self.retrier = self.retry.bind(
                publisher=publisher, topic=self.topic, subscription=self.subscription
            )

    async def settle(self, message: Message, error: DecodeError) -> None:
        """Dead-letter ``message``, or log it and nack it with the longest backoff."""
        if message.settled:
            return
        if self.retrier is not None and await self.retrier.dead_letter(message, error):
            return
        log.error(
            "message %s of %s/%s does not decode and there is no dead-letter destination: nacked, "
            "redelivered in %.1fs (%s)",
            message.id,
            self.topic,
            self.subscription,
            self.delay,
            error,
        )
        await message.nack(self.delay)


class Output:
    """The output topic of a subscriber: its return values, published typed, on one shared publisher."""

    def __init__(self, publisher: Publisher, name: str, binding: Binding[Any] | None) -> None:
        self.publisher = publisher
        self.name = name
        self._raw = publisher.topic(name)
        self._handles: dict[type[Any], TypedTopic[Any]] = {}
        self._fixed = typed_topic(publisher, name, binding) if binding is not None else None

    def _handle(self, value: Any) -> TypedTopic[Any]:
        if self._fixed is not None:
            return self._fixed
        kind = type(value)
        handle = self._handles.get(kind)
        if handle is None:
            handle = self._handles[kind] = typed_topic(self.publisher, self.name, ensure_binding(kind))
        return handle

    async def publish(self, value: Any, key: str | None) -> None:
        """Publish ``value`` (bytes and OutboundMessage as they are, else encoded by its binding)."""
        if isinstance(value, OutboundMessage):
            await self._raw.publish(value)
        elif isinstance(value, bytes):
            await self._raw.publish(OutboundMessage(value, key))
        else:
            await self._handle(value).publish(value, key=key)

    async def publish_all(self, values: Sequence[Any]) -> None:
        """Publish ``values`` in one batch (a batch subscriber's return value)."""
        if not values:
            return
        if all(isinstance(v, OutboundMessage | bytes) for v in values):
            await self._raw.batch_publish(
                *(v if isinstance(v, OutboundMessage) else OutboundMessage(v) for v in values)
            )
        else:
            await self._handle(values[0]).batch_publish(*values)


@dataclass
class Subscriber:
    """One ``@app.subscriber`` registration: the handler, its source, its policies, its signature."""

    handler: Callable[..., Any]
    topic: str
    subscription: str
    signature: Signature
    concurrency: int = 1
    retry: RetryPolicy | None = None
    ack: AckPolicy = "auto"
    backend: str = "default"
    publish_to: str | None = None
    publish_backend: str | None = None
    batch_size: int = 0
    batch_timeout: float = 1.0
    max_lease: float | None = DEFAULT_MAX_LEASE
    options: dict[str, Any] = field(default_factory=dict)
    #: The subscriber's own middleware (inside the app's), outermost first.
    middleware: tuple[Middleware, ...] = ()
    #: An ``@app.records`` subscriber: ``topic`` is its topics (comma-joined), ``subscription`` its group.
    records: bool = False
    #: Records: one lane per partition and key instead of per partition.
    per_key: bool = False
    #: Records: at most this many read and not finished.
    max_in_flight: int = DEFAULT_MAX_IN_FLIGHT

    @property
    def name(self) -> str:
        """The handler's qualified name."""
        return handler_name(self.handler)

    def _retry_for(self, publisher: Publisher) -> RetryPolicy | None:
        """The retry policy, its DeadLetterTopic (when it names no publisher) on the app's shared one."""
        retry = self.retry
        if (
            retry is not None
            and isinstance(retry.dead_letter, DeadLetterTopic)
            and retry.dead_letter.publisher is None
        ):
            dead = dataclasses.replace(retry.dead_letter, publisher=publisher)
            retry = dataclasses.replace(retry, dead_letter=dead)
        return retry

    def consumer(
        self,
        backend: Any,
        publishers: Callable[[str], Publisher],
        observe: Callable[[Subscriber, Message], None] | None,
        *,
        middleware: Sequence[Middleware] = (),
        provider: Any = None,
        telemetry: Any = None,
    ) -> tuple[Any, Callable[[Any], Awaitable[None]]]:
        """The ``(receiver, handler)`` pair that runs this subscriber on ``backend``.

        ``publishers(name)`` is the shared publisher of backend ``name``; ``observe`` is called with
        every delivery (the app's test kit records them); ``middleware`` is the app's, run outside
        the subscriber's own; ``provider`` holds the app's dependency overrides; ``telemetry`` is the
        tracing and metrics stage (:class:`~broker.telemetry.core.ConsumerTelemetry`; None: off),
        the outermost stage of every delivery.
        """
        receiver, handle = self._consumer(backend, publishers, observe, middleware, provider)
        if telemetry is not None:
            handle = telemetry.stage(handle)
        return receiver, handle

    def _consumer(
        self,
        backend: Any,
        publishers: Callable[[str], Publisher],
        observe: Callable[[Subscriber, Message], None] | None,
        middleware: Sequence[Middleware],
        provider: Any,
    ) -> tuple[Any, Callable[[Any], Awaitable[None]]]:
        chain = (*middleware, *self.middleware)
        if self.records:
            return self._records_consumer(backend, publishers, observe, chain, provider)
        publisher = publishers(self.backend)
        retry = self._retry_for(publisher)
        undecodable = Undecodable(retry, self.topic, self.subscription)
        undecodable.bind(publisher)
        output = None
        handle: Callable[[Any], Awaitable[None]]
        if self.publish_to is not None:
            output = Output(
                publishers(self.publish_backend or self.backend), self.publish_to, self.signature.returns
            )
        if self.signature.batch:
            source = backend.batched_messages(
                self.topic,
                self.subscription,
                batch_size=self.batch_size,
                batch_timeout=self.batch_timeout,
                **self.options,
            )
            receiver = adapt.batched_receiver(
                source,
                self.concurrency,
                retry=retry,
                publisher=publisher,
                topic=self.topic,
                subscription=self.subscription,
            )
            handle = self._batch_pipeline(backend, publisher, undecodable, output, observe, chain, provider)
        else:
            receiver = backend.receiver(
                self.topic, self.subscription, concurrency=self.concurrency, retry=retry, **self.options
            )
            handle = self._pipeline(backend, publisher, undecodable, output, observe, chain, provider)
        return receiver, functools.update_wrapper(handle, self.handler)  # logs name the user's handler

    def _records_consumer(
        self,
        backend: Any,
        publishers: Callable[[str], Publisher],
        observe: Callable[[Subscriber, Any], None] | None,
        middleware: Sequence[Middleware],
        provider: Any,
    ) -> tuple[Any, Callable[[Any], Awaitable[None]]]:
        publisher = publishers(self.backend)
        policy = self._retry_for(publisher) or RetryPolicy(dead_letter=None)
        retrier = dataclasses.replace(policy, mode="ordered").bind(
            publisher=publisher, topic=None, subscription=self.subscription
        )
        output = None
        if self.publish_to is not None:
            output = Output(
                publishers(self.publish_backend or self.backend), self.publish_to, self.signature.returns
            )
        topics = self.topic.split(",")
        source = backend.records(topics if len(topics) > 1 else topics[0], self.subscription, **self.options)
        receiver = PartitionedReceiver(
            source, per_key=self.per_key, concurrency=self.concurrency, max_in_flight=self.max_in_flight
        )
        payload = self.signature.payload
        decode = payload.for_records(backend) if payload is not None else None
        call_handler = self._caller(publisher, provider)

        prepare = payload.prepare if payload is not None else None

        async def call(record: Record) -> Any:
            if prepare is not None:
                await prepare([record])
            value = decode(record) if decode is not None else None
            return await call_handler(value, record)

        run = _wrapped(call, middleware)

        async def attempt(record: Record) -> None:
            result = await run(record)
            if output is not None and result is not None:
                await output.publish(result, record.key)

        async def handle(record: Record) -> None:
            if observe is not None:
                observe(self, record)
            # The retrier sees a copy it cannot commit: commits are the receiver's, in order.
            await retrier.handle(_uncommitted(record), attempt)

        return receiver, functools.update_wrapper(handle, self.handler)

    def _max_lease(self, backend: Any) -> float | None:
        """How long leases are kept on ``backend`` (None: not at all, the backend has no ``in_progress``)."""
        if not self.max_lease or not getattr(backend.capabilities, "in_progress", False):
            return None
        return self.max_lease

    def _invoker(self, provider: Any) -> Callable[[list[Any], dict[str, Any]], Awaitable[Any]]:
        handler = self.handler
        if self.signature.depends:
            from broker.app.depends import new_provider, wrap

            handler = wrap(handler, provider if provider is not None else new_provider())
        if self.signature.is_async:

            async def call_async(args: list[Any], kwargs: dict[str, Any]) -> Any:
                return await handler(*args, **kwargs)

            return call_async

        async def call_in_thread(args: list[Any], kwargs: dict[str, Any]) -> Any:
            return await asyncio.to_thread(handler, *args, **kwargs)

        return call_in_thread

    def _arguments(
        self, publisher: Publisher, logger: logging.Logger
    ) -> Callable[[Any, Any], tuple[list[Any], dict[str, Any]]]:
        """``assemble(value, message)``: the handler's arguments for a delivery."""
        plan = [(p.name, p.kind, p.keyword) for p in self.signature.parameters]

        def assemble(value: Any, message: Any) -> tuple[list[Any], dict[str, Any]]:
            args: list[Any] = []
            kwargs: dict[str, Any] = {}
            for name, kind, keyword in plan:
                if kind == "payload":
                    got = value
                elif kind == "message":
                    got = message
                elif kind == "key":
                    got = message.key
                elif kind == "attributes":
                    got = message.attributes
                elif kind == "publisher":
                    got = publisher
                else:
                    got = logger
                if keyword:
                    kwargs[name] = got
                else:
                    args.append(got)
            return args, kwargs

        return assemble

    def _takes_only_payload(self) -> bool:
        """True for an ``async def`` (without ``Depends()``) whose one parameter is the payload,
        by position."""
        shape = tuple((p.kind, p.keyword) for p in self.signature.parameters)
        return self.signature.is_async and not self.signature.depends and shape == (("payload", False),)

    def _caller(self, publisher: Publisher, provider: Any) -> Callable[[Any, Any], Awaitable[Any]]:
        """``call(value, delivery)``: the handler called with its arguments for a delivery.

        An ``async def`` taking only the payload and/or the delivery, by position, is called
        directly (the common shapes); any other goes through the general assembly.
        """
        shape = tuple((p.kind, p.keyword) for p in self.signature.parameters)
        handler = self.handler
        if self.signature.is_async and not self.signature.depends:
            if shape == (("payload", False),):
                return lambda value, delivery: handler(value)
            if shape == (("payload", False), ("message", False)):
                return lambda value, delivery: handler(value, delivery)
            if shape == (("message", False),):
                return lambda value, delivery: handler(delivery)
        assemble = self._arguments(publisher, logging.getLogger(self.name))
        invoke = self._invoker(provider)

        def call(value: Any, delivery: Any) -> Awaitable[Any]:
            args, kwargs = assemble(value, delivery)
            return invoke(args, kwargs)

        return call

    def _pipeline(
        self,
        backend: Any,
        publisher: Publisher,
        undecodable: Undecodable,
        output: Output | None,
        observe: Callable[[Subscriber, Message], None] | None,
        middleware: Sequence[Middleware] = (),
        provider: Any = None,
    ) -> Callable[[Message], Awaitable[None]]:
        payload = self.signature.payload
        decode = payload.for_backend(backend) if payload is not None else None
        # A plain binding decodes inline (the content type checked as Binding.decode_received does).
        plain = payload.plain_decoder(backend) if payload is not None else None
        plain_decode, plain_type, plain_binding = plain if plain is not None else (None, "", None)
        call_handler = self._caller(publisher, provider)
        # An async handler taking only the payload, by position, is awaited directly.
        direct = self.handler if self._takes_only_payload() else None
        auto = self.ack == "auto"
        max_lease = self._max_lease(backend)
        keeper = LeaseKeeper(max_lease) if max_lease is not None else None
        held = keeper.held if keeper is not None else {}
        seen = keeper.seen if keeper is not None else {}

        prepare = payload.prepare if payload is not None else None

        async def call(message: Message, finish: bool = True) -> Any:
            """Decode, run the handler (its lease kept), then with ``finish`` publish its result and
            ack; without, return the result (inside middleware, which must see it first).

            This runs once per message with no other Python call of its own: the decoding, the
            handler call and the lease keeper's hold and release are inline."""
            value = None
            if decode is not None:
                if prepare is not None:
                    await prepare([message])
                try:
                    data = message.data
                    attributes = message.attributes
                    if (
                        plain_decode is not None
                        and data is not None
                        and attributes.get(_CONTENT_TYPE, plain_type) == plain_type
                    ):
                        try:
                            value = plain_decode(data)
                        except Exception as exc:
                            raise plain_binding.failure(  # type: ignore[union-attr]
                                exc, message, attributes.get(_CONTENT_TYPE)
                            ) from exc
                        message._binding = plain_binding  # as tag_message does: message.decoded
                        message._decoded = value
                    else:
                        value = decode(message)
                except DecodeError as exc:
                    if exc.received is not message:
                        raise
                    await undecodable.settle(message, exc)
                    return None
            if keeper is None:
                result = await (direct(value) if direct is not None else call_handler(value, message))
            else:
                # keeper.hold(message) and keeper.release(message), inline: no timer per message,
                # and while no other handler of this subscriber runs, no dictionary entry either
                key = 0
                if keeper.current is None:
                    keeper.current = message
                else:
                    key = id(message)
                    held[key] = message
                if message._ack_deadline < keeper.armed_for:
                    keeper.arm(message)
                try:
                    result = await (direct(value) if direct is not None else call_handler(value, message))
                finally:
                    if key:
                        del held[key]  # this call's own entry
                    else:
                        keeper.current = None
                    if seen:
                        seen.pop(id(message), None)
            if not finish:
                return result
            if output is not None and result is not None:
                await output.publish(result, message.key)  # before the ack: at-least-once
            if auto and message._state == _PENDING:  # not settled by the handler
                await message.ack()
            return None

        if not middleware and direct is not None and plain is not None and decode is not None and auto:
            seer = functools.partial(observe, self) if observe is not None else None
            return _payload_only_call(direct, plain, decode, undecodable, output, keeper, self.handler, seer)
        if not middleware and observe is None:
            return call  # one coroutine a message

        run = _wrapped(lambda message: call(message, False), middleware)

        async def handle(message: Message) -> None:
            if observe is not None:
                observe(self, message)
            result = await run(message)
            if output is not None and result is not None:
                await output.publish(result, message.key)  # before the ack: at-least-once
            if auto and not message.settled:
                await message.ack()

        return handle

    def _batch_pipeline(
        self,
        backend: Any,
        publisher: Publisher,
        undecodable: Undecodable,
        output: Output | None,
        observe: Callable[[Subscriber, Message], None] | None,
        middleware: Sequence[Middleware] = (),
        provider: Any = None,
    ) -> Callable[[list[Message]], Awaitable[None]]:
        payload = self.signature.payload
        decode = payload.for_backend(backend) if payload is not None else None
        call_handler = self._caller(publisher, provider)
        auto = self.ack == "auto"
        max_lease = self._max_lease(backend)
        keeper = LeaseKeeper(max_lease) if max_lease is not None else None

        prepare = payload.prepare if payload is not None else None

        async def call(messages: list[Message]) -> Any:
            good: list[Message] = []
            values: list[Any] = []
            if prepare is not None:
                await prepare(messages)
            for message in messages:
                try:
                    values.append(decode(message) if decode is not None else None)
                except DecodeError as exc:
                    if exc.received is not message:
                        raise
                    await undecodable.settle(message, exc)
                    continue
                good.append(message)
            if not good:
                return None
            if keeper is None:
                return await call_handler(values, good)
            for message in good:
                keeper.hold(message)
            try:
                return await call_handler(values, good)
            finally:
                for message in good:
                    keeper.release(message)

        run = _wrapped(call, middleware)

        async def handle_batch(messages: list[Message]) -> None:
            if observe is not None:
                for message in messages:
                    observe(self, message)
            result = await run(messages)
            if output is not None and result is not None:
                if not isinstance(result, list | tuple):
                    raise ConfigError(
                        f"batch subscriber {self.name} publishes to {self.publish_to!r}: it must "
                        f"return a list, got {type(result).__name__}"
                    )
                await output.publish_all(result)
            if auto:
                await ack_all([m for m in messages if not m.settled])

        return handle_batch


def _payload_only_call(
    handler: Callable[[Any], Awaitable[Any]],
    plain: tuple[Callable[[bytes], Any], str, Binding[Any]],
    decode: Callable[[Message], Any],
    undecodable: Undecodable,
    output: Output | None,
    keeper: LeaseKeeper | None,
    user_handler: Callable[..., Any],
    observe: Callable[[Message], None] | None,
) -> Callable[[Message], Awaitable[None]]:
    """The per-message call of the commonest subscriber: an ``async def`` taking only its payload
    (a plain binding's, so no prepare step), acked on return, with no middleware.

    It does what the general call does for such a subscriber, with what cannot happen left out: the
    handler never sees its message, so the message is not tagged with its value unless ``observe``
    (the app's test kit) sees it too, and the only branches left are the content type, a decode
    failure, the lease keeper's slot and the output. It settles every message before returning, so
    it is registered to apply a receiver's failure rule itself
    (:func:`broker.adapt.receivers.register_failure_rule`): a receiver without a retry policy runs
    one coroutine a message instead of two.
    """
    plain_decode, plain_type, binding = plain
    held = keeper.held if keeper is not None else {}
    seen = keeper.seen if keeper is not None else {}

    def build(failed: Callable[[Message], Awaitable[None]] | None) -> Callable[[Message], Awaitable[None]]:
        async def call(message: Message) -> None:
            try:
                if observe is not None:
                    observe(message)
                data = message.data
                attributes = message.attributes
                try:
                    # a missing content type is the binding's own (one dictionary call: the cheapest test)
                    if data is not None and attributes.get(_CONTENT_TYPE, plain_type) == plain_type:
                        try:
                            value = plain_decode(data)
                        except Exception as exc:
                            raise binding.failure(exc, message, attributes.get(_CONTENT_TYPE)) from exc
                        if observe is not None:  # as tag_message does: message.decoded is this value
                            message._binding = binding
                            message._decoded = value
                    else:
                        value = decode(message)  # another content type: its own decoder
                except DecodeError as exc:
                    if exc.received is not message:
                        raise
                    await undecodable.settle(message, exc)
                    return
                if keeper is None:
                    result = await handler(value)
                elif keeper.current is None:
                    # keeper.hold(message) and keeper.release(message), inline: the common case is
                    # one handler at a time, held in the keeper's slot, with no timer per message
                    keeper.current = message
                    if message._ack_deadline < keeper.armed_for:
                        keeper.arm(message)
                    try:
                        result = await handler(value)
                    finally:
                        keeper.current = None
                        if seen:
                            seen.pop(id(message), None)
                else:
                    key = id(message)
                    held[key] = message
                    if message._ack_deadline < keeper.armed_for:
                        keeper.arm(message)
                    try:
                        result = await handler(value)
                    finally:
                        del held[key]
                        if seen:
                            seen.pop(key, None)
                if output is not None and result is not None:
                    await output.publish(result, message.key)  # before the ack: at-least-once
                if message._state == _PENDING:  # a drain that gave up on it may have settled it
                    await message.ack()
            except Exception:
                if failed is None:
                    raise
                await failed(message)

        return functools.update_wrapper(call, user_handler)  # logs name the user's handler

    plain_call = build(None)
    register_failure_rule(plain_call, build)
    return plain_call


class _CommittedInOrder:
    """The committer of the records a records subscriber's handler is given: commits are the
    :class:`~broker.app.partitioned.PartitionedReceiver`'s, below the lowest unfinished record."""

    async def commit(self, record: Record) -> None:
        log.debug("%s/%d@%d: committed by the app in order", record.topic, record.partition, record.offset)


_IN_ORDER = _CommittedInOrder()


def _uncommitted(record: Record) -> Record:
    return Record(
        record.topic,
        record.partition,
        record.offset,
        record.value,
        record.key,
        record.attributes,
        record.publish_time,
        record.ingestion_time,
        record.raw,
        _IN_ORDER,
    )


def _wrapped(
    call: Callable[[Any], Awaitable[Any]], middleware: Sequence[Middleware]
) -> Callable[[Any], Awaitable[Any]]:
    """``call`` inside ``middleware``, the first outermost (``call`` itself when there is none)."""
    for layer in reversed(middleware):
        call = _layer(layer, call)
    return call


def _layer(layer: Middleware, call_next: Callable[[Any], Awaitable[Any]]) -> Callable[[Any], Awaitable[Any]]:
    async def run(delivery: Any) -> Any:
        return await layer(delivery, call_next)

    return run
