"""The portable publishing layer: ``Publisher`` and ``Topic`` written once over a backend's driver.

A backend supplies a :class:`PublishDriver` (send validated messages to one topic; close); this
module does the rest once for every backend: the topic-handle cache, name and message
validation (typed errors from :mod:`broker.driver.outbound`), the closed state, and the publish
interceptors (:class:`PublishInterceptor`, synchronous rewrites) and the send middleware
(:data:`SendMiddleware`, async "around" hooks that see the send complete or fail) where
cross-cutting features such as tracing and metrics (:mod:`broker.telemetry`) hook in. A
backend with more to offer (transactions, a flush, an escape hatch to its SDK) subclasses
:class:`DriverPublisher` and adds it.

A publisher is cheap: a backend keeps one driver (one SDK client) and hands every publisher a
*shared* view of it (``DriverPublisher(driver, shared=True)``), so ``backend.publisher()`` per
publish costs no connection. Closing a shared publisher waits for its own sends still in flight
and leaves the driver open for the others; the backend's ``close()`` closes the driver. A
publisher that owns its driver (a transactional one) closes it with itself.

How a message flows: ``Topic.publish`` -> validation -> interceptors -> middleware ->
``driver.send`` -> the backend's mapping -> its SDK. With no interceptor and no middleware the
layer adds nothing but validation to a publish.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable, Sequence
from typing import Any, Protocol, runtime_checkable

from broker.driver.options import check_seconds
from broker.driver.outbound import check_batch, check_outbound, is_plain
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError, ConfigError
from broker.interfaces import Send, SendMiddleware  # defined with the publisher protocols
from broker.message import OutboundMessage

log = logging.getLogger("broker.driver.publishing")

#: How long a shared publisher's ``close()`` waits for its sends in flight by default (seconds).
DEFAULT_CLOSE_TIMEOUT = 10.0

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "ClosingDriver",
    "DriverPublisher",
    "DriverTopic",
    "HandOver",
    "ImmediatePublishDriver",
    "PublishDriver",
    "PublishInterceptor",
    "Send",
    "SendMiddleware",
]

#: Called with the topic name and the validated messages before they are sent; it returns the
#: messages to send instead (for example with trace context added to their attributes), or
#: ``None`` to send them unchanged. A failure raised here fails the publish.
PublishInterceptor = Callable[[str, Sequence[OutboundMessage]], Sequence[OutboundMessage] | None]


class PublishDriver(Protocol):
    """A backend's half of publishing.

    ``send`` gets messages that are already validated, in the order given, at least one; it
    returns once the broker has every one of them and raises a :mod:`broker.errors` error (the
    backend's ``translate``) otherwise. ``check_topic`` refuses names the broker cannot take
    (the layer already refused empty and non-text ones). ``close`` flushes what is in flight and
    releases the client; it is called once.
    """

    def check_topic(self, name: str) -> None:
        """Raise ``ConfigError`` for a non-empty name the broker cannot take (called once per name)."""
        ...

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Send ``messages`` to ``topic``; return when the broker has all of them."""
        ...

    async def close(self) -> None:
        """Flush and release the client."""
        ...


@runtime_checkable
class ImmediatePublishDriver(Protocol):
    """Optional part of a :class:`PublishDriver` whose sends complete without waiting (in memory).

    ``send_now`` does what ``send`` does, synchronously; ``publish`` then costs no extra await.
    """

    def send_now(self, topic: str, messages: Sequence[OutboundMessage]) -> None:
        """Send validated messages to ``topic`` at once."""
        ...


class HandOver:
    """Counts a driver's sends that have not yet handed every message to the client.

    A driver that offers it (as its ``hand_over`` attribute) runs the part of ``send`` that hands
    messages to its SDK or connection inside ``with self.hand_over:`` and waits for the broker's
    confirmations after it. Once :meth:`wait` returns, every send started before holds all its
    messages in the client, in order: a caller may start its next send without it overtaking an
    earlier one (the blocking publisher keeps several batches in flight this way). Only the
    loop thread uses it.
    """

    __slots__ = ("_count", "_waiters", "last")

    def __init__(self) -> None:
        self._count = 0
        #: The task that entered last (a caller can tell that the send it started is handing over).
        self.last: asyncio.Task[Any] | None = None
        self._waiters: list[asyncio.Future[None]] = []

    def __enter__(self) -> None:
        self._count += 1
        self.last = asyncio.current_task()

    def __exit__(self, *exc: object) -> None:
        self._count -= 1
        if not self._count and self._waiters:
            waiters, self._waiters = self._waiters, []
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(None)

    @property
    def handing(self) -> int:
        """How many sends are still handing their messages over."""
        return self._count

    async def wait(self) -> None:
        """Return once no send is handing messages over (at once when none is)."""
        while self._count:
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            await waiter


class ClosingDriver:
    """The closed state of a :class:`PublishDriver`, for a driver whose sends can outlive ``close()``.

    A send checks :meth:`_check_open` where it resumes after a wait (a producer being created, room
    in a full queue), so a publish racing the publisher's close raises the same ``ClosedError`` the
    layer raises for a publish after it; ``close()`` starts with ``if not self._start_closing():
    return`` (idempotent).
    """

    _closed: bool = False

    @property
    def closed(self) -> bool:
        """True once ``close()`` began."""
        return self._closed

    def _check_open(self, topic: str) -> None:
        """Raise ``ClosedError`` for a publish to ``topic`` once the driver is closing."""
        if self._closed:
            raise ClosedError(f"cannot publish to {topic!r}: the publisher is closed")

    def _start_closing(self) -> bool:
        """Mark the driver closed; False when it already was (``close()`` has nothing left to do)."""
        if self._closed:
            return False
        self._closed = True
        return True


class DriverTopic:
    """A publishing handle for one topic (``broker.Topic``), the same on every backend."""

    __slots__ = ("__weakref__", "_publisher", "name")

    def __init__(self, publisher: DriverPublisher, name: str) -> None:
        self._publisher = publisher
        self.name = name

    def __repr__(self) -> str:
        return f"<Topic {self.name!r} of {self._publisher!r}>"

    async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        """Publish one message; returns once the broker has it (``timeout``: seconds >= 0, or None)."""
        if timeout is not None:
            check_seconds("timeout", timeout)
        if not is_plain(message):
            check_outbound(message)
        publisher = self._publisher
        if publisher._closed or publisher.interceptors or publisher.middleware:
            await publisher._send(self.name, (message,), timeout)
        elif publisher._send_now is not None:  # the common cases, one await less, or none
            publisher._send_now(self.name, (message,))
        else:
            publisher._sending += 1
            try:
                await publisher._driver.send(self.name, (message,), timeout)
            finally:
                publisher._sending -= 1
                if publisher._idle is not None:
                    publisher._wake()

    async def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        """Publish many messages in order; returns once the broker has all of them."""
        if timeout is not None:
            check_seconds("timeout", timeout)
        check_batch(messages)
        if messages:
            await self._publisher._send(self.name, messages, timeout)

    async def send_checked(self, messages: Sequence[OutboundMessage], timeout: float | None = None) -> None:
        """:meth:`batch_publish` of messages the caller has checked already, each one as
        :func:`~broker.driver.outbound.check_outbound` does (``timeout``: seconds >= 0, or None).

        For a hand-over that validates every message where it takes it in, such as the blocking
        publisher's (:mod:`broker.sync`): its loop-side batches are not walked a second time.
        Interceptors and send middleware run as for any publish.
        """
        if messages:
            await self._publisher._send(self.name, messages, timeout)


class DriverPublisher(AsyncResource):
    """A ``broker.Publisher`` over a :class:`PublishDriver`: topic handles, closed state, interceptors
    and send middleware.

    With ``shared`` the driver belongs to the backend and serves other publishers too: ``close()``
    waits (up to ``close_timeout`` seconds, None: no limit) for this publisher's sends in flight
    and leaves the driver open. Without it the publisher owns the driver and ``close()`` closes
    it (its flush included).
    """

    def __init__(
        self,
        driver: PublishDriver,
        *,
        interceptors: Sequence[PublishInterceptor] = (),
        shared: bool = False,
        close_timeout: float | None = DEFAULT_CLOSE_TIMEOUT,
    ) -> None:
        self._driver = driver
        # ImmediatePublishDriver's check, without a runtime protocol check's cost on every publisher
        self._send_now: Callable[[str, Sequence[OutboundMessage]], None] | None = getattr(
            driver, "send_now", None
        )
        #: Held weakly: a handle refers to its publisher, so a strong cache would make every
        #: publisher with a handle a reference cycle, freed by the cycle collector only, late.
        self._topics: weakref.WeakValueDictionary[str, DriverTopic] = weakref.WeakValueDictionary()
        self._closed = False
        self._shared = shared
        self._close_timeout = close_timeout
        #: Sends through the driver not finished yet; ``_idle`` is set once they are (at close).
        self._sending = 0
        self._idle: asyncio.Future[None] | None = None
        #: Called once with this publisher when it closes (the backend drops it from its list).
        self._on_close: list[Callable[[DriverPublisher], None]] = []
        #: Run in order on every publish (see :data:`PublishInterceptor`); add with :meth:`intercept`.
        self.interceptors: list[PublishInterceptor] = list(interceptors)
        #: Wrapped around every send, the first added outermost (see :data:`SendMiddleware`); add
        #: with :meth:`wrap_send`.
        self.middleware: list[SendMiddleware] = []
        #: Topic name -> the ``broker.typed`` binding a typed topic handle publishes it with (set by
        #: ``broker.typed.topic``; read by tools such as the publish recorder, never on the send path).
        self.bindings: dict[str, Any] = {}

    def __repr__(self) -> str:
        return f"<{type(self).__name__}{' closed' if self._closed else ''}>"

    @property
    def driver(self) -> PublishDriver:
        """The backend's driver underneath."""
        return self._driver

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def shared(self) -> bool:
        """True when the driver is the backend's, shared with its other publishers."""
        return self._shared

    def intercept(self, interceptor: PublishInterceptor) -> None:
        """Run ``interceptor`` on every publish from now on (after those added before)."""
        self.interceptors.append(interceptor)

    def wrap_send(self, middleware: SendMiddleware) -> None:
        """Wrap ``middleware`` around every send from now on (inside those added before)."""
        self.middleware.append(middleware)

    def topic(self, name: str) -> DriverTopic:
        """The handle for topic ``name`` (one per name while a handle for it is held)."""
        topic = self._topics.get(name)
        if topic is None:
            if self._closed:
                raise ClosedError("the publisher is closed")
            if not isinstance(name, str) or not name:
                raise ConfigError(f"a topic name must be a non-empty string, got {name!r}")
            self._driver.check_topic(name)
            topic = self._topics[name] = DriverTopic(self, name)
        elif self._closed:
            raise ClosedError("the publisher is closed")
        return topic

    async def _send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        if self._closed:
            raise ClosedError(f"cannot publish to {topic!r}: the publisher is closed")
        for interceptor in self.interceptors:
            changed = interceptor(topic, messages)
            if changed is not None:
                check_batch(changed)
                messages = changed
        if not messages:
            return
        self._sending += 1
        try:
            if self.middleware:
                await self._send_through(0, topic, messages, timeout)
            else:
                await self._driver.send(topic, messages, timeout)
        finally:
            self._sending -= 1
            if self._idle is not None:
                self._wake()

    def _wake(self) -> None:
        """Resolve ``_idle`` once no send is in flight (``close()`` waits for it)."""
        if not self._sending and self._idle is not None and not self._idle.done():
            self._idle.set_result(None)

    async def _send_through(
        self, index: int, topic: str, messages: Sequence[OutboundMessage], timeout: float | None
    ) -> None:
        """Run ``middleware[index:]`` around the driver's send."""
        if index == len(self.middleware):
            await self._driver.send(topic, messages, timeout)
            return

        async def send(passed: Sequence[OutboundMessage]) -> None:
            await self._send_through(index + 1, topic, passed, timeout)

        await self.middleware[index](topic, messages, send)

    async def close(self) -> None:
        """Flush what is in flight; later publishes raise ``ClosedError``. Idempotent.

        A shared publisher waits for its own sends still in flight and leaves the backend's client
        open for its other publishers; one that owns its driver closes it (which flushes it).
        """
        if self._closed:
            return
        self._closed = True
        try:
            if self._shared:
                await self._drain()
            else:
                await self._driver.close()
        finally:
            self._closed_now()

    def _closed_now(self) -> None:
        """Mark the publisher closed at once, without waiting for its sends.

        The backend's close does this to its shared publishers before it closes their driver:
        the driver's close flushes what they sent, or fails it with a typed error.
        """
        self._closed = True
        callbacks, self._on_close = self._on_close, []
        for callback in callbacks:
            callback(self)

    async def _drain(self) -> None:
        """Wait for this publisher's sends in flight (up to ``close_timeout``)."""
        if not self._sending:
            return
        self._idle = asyncio.get_running_loop().create_future()
        try:
            await asyncio.wait_for(asyncio.shield(self._idle), self._close_timeout)
        except TimeoutError:
            # The sends go on over the shared client and report their outcome to their callers.
            log.warning(
                "%r closed with %d sends still in flight after %ss", self, self._sending, self._close_timeout
            )
