"""``app.testing()``: run an :class:`~broker.App` on ``inmem://``, in virtual time, with the recorder.

::

    async with app.testing() as test:
        await test.publish("orders", Order(id=1, total=9.5))
        await test.until(lambda: test.settled("orders") == ["acked"])
        test.recorder.assert_published("invoices", value=Invoice(1, 9.5))

Every backend name of the app gets a fresh in-memory broker (forgotten after the block); every
publisher of them is watched by a :class:`~broker.testing.PublishRecorder` (what the handlers
published, also to dead-letter topics); every delivery a subscriber was given is kept, so a test
asserts how it was settled. In virtual time (the default) ack deadlines, backoff delays and
batch windows pass at once; a plain ``def`` handler runs in a thread, which virtual time does not
wait for: test those with ``virtual_time=False``.

With a real broker's URL (``app.testing(url=...)``, or the ``POLYBROKER_TEST_URL`` environment
variable, which the pytest plugin's ``--polybroker-url`` sets), every backend name connects to that
broker instead, in real time: the same test module runs on Kafka, NATS, ... (give it topic names
of its own, as a real broker keeps what earlier runs left).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

from broker.app.application import DEFAULT_BACKEND
from broker.app.subscriber import Subscriber
from broker.message import Message, OutboundMessage
from broker.testing import PublishRecorder, virtual_time, wait_until
from broker.typed import topic as typed_topic
from broker.typed.binding import ensure_binding

if TYPE_CHECKING:
    from broker.app.application import App

__all__ = ["ENV_TEST_URL", "AppTest", "Delivery"]

#: The environment variable naming a real broker for ``app.testing()`` (set by ``--polybroker-url``).
ENV_TEST_URL = "POLYBROKER_TEST_URL"


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message a subscriber was given: its topic and subscription, and the message (whose
    ``state`` says how it was settled)."""

    topic: str
    subscription: str
    message: Message
    #: The event loop's time when the subscriber was given it (virtual time in a virtual-time test):
    #: the figure redelivery delays are asserted on.
    at: float


class AppTest:
    """The app running on ``inmem://`` for a test (an async context manager; see the module)."""

    def __init__(
        self,
        app: App,
        *,
        virtual_time: bool = True,
        ack_deadline: float | None = None,
        url: str | None = None,
    ) -> None:
        self.app = app
        configured = url or os.environ.get(ENV_TEST_URL) or None
        #: The real broker the app runs on (None: fresh in-memory brokers, in virtual time by default).
        self.url = configured if configured and not configured.startswith("inmem:") else None
        #: Every message the app's publishers sent (outputs, dead letters, the test's own publishes).
        self.recorder = PublishRecorder()
        #: Every delivery a subscriber was given, in order (redeliveries included).
        self.deliveries: list[Delivery] = []
        self._virtual = virtual_time
        self._ack_deadline = ack_deadline
        self._stack: contextlib.AsyncExitStack | None = None

    async def __aenter__(self) -> AppTest:
        stack = contextlib.AsyncExitStack()
        await stack.__aenter__()
        try:
            if self._virtual and self.url is None:
                stack.enter_context(virtual_time())
            self.app._observers.append(self._observe)
            stack.callback(self.app._observers.remove, self._observe)
            if self.url is None:
                specs = self.app._test_specs(self._ack_deadline)
            else:
                specs = {name: self.url for name in self.app.backend_specs}
            await stack.enter_async_context(self._serving(specs))
        except BaseException:
            await stack.__aexit__(None, None, None)
            raise
        self._stack = stack
        return self

    @contextlib.asynccontextmanager
    async def _serving(self, specs: Mapping[str, str]) -> Any:
        app = self.app
        stop = asyncio.Event()
        app._on_connect.append(self.recorder.watch)
        backends: list[Any] = []
        try:
            async with app._serving(30.0, (), stop, None, specs) as task:
                backends.extend(app._backends.values())
                try:
                    yield task
                finally:
                    stop.set()
        finally:
            app._on_connect.remove(self.recorder.watch)
            for backend in backends:
                forget = getattr(backend, "forget", None)
                if forget is not None:
                    forget()

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        stack, self._stack = self._stack, None
        if stack is not None:
            await stack.__aexit__(exc_type, exc, tb)

    async def publish(
        self,
        topic: str,
        value: Any,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        backend: str = DEFAULT_BACKEND,
    ) -> None:
        """Publish ``value`` to ``topic`` on ``backend``: bytes and OutboundMessage as they are, any
        other value encoded by its :mod:`broker.typed` binding (JSON)."""
        publisher = self.app.publisher(backend)
        if isinstance(value, OutboundMessage):
            await publisher.topic(topic).publish(value)
        elif isinstance(value, bytes):
            await publisher.topic(topic).publish(OutboundMessage(value, key, attributes or {}))
        else:
            handle = typed_topic(publisher, topic, ensure_binding(type(value)))
            await handle.publish(value, key=key, attributes=attributes)

    def _observe(self, subscriber: Subscriber, message: Message) -> None:
        self.deliveries.append(
            Delivery(subscriber.topic, subscriber.subscription, message, asyncio.get_running_loop().time())
        )

    def delivered(self, topic: str | None = None) -> list[Message]:
        """The messages of ``topic`` (or of every topic) the subscribers were given, in order."""
        return [d.message for d in self.deliveries if topic is None or d.topic == topic]

    def settled(self, topic: str | None = None) -> list[str]:
        """How each delivery was settled, in order: ``"acked"``, ``"nacked"``, ``"dead-lettered"`` or
        ``"pending"`` (still in a handler, or left unsettled)."""
        return [m.state for m in self.delivered(topic)]

    async def until(self, condition: Callable[[], bool], timeout: float = 60.0) -> None:
        """Wait until ``condition()`` holds; ``TimeoutError`` after ``timeout`` (virtual) seconds."""
        await wait_until(condition, timeout)
