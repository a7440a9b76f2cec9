"""``broker.App``: declare subscribers once with decorators, run them on any broker.

::

    app = broker.App("nats://127.0.0.1:4222")

    @app.subscriber("orders", "billing", publish_to="invoices")
    async def bill(order: Order) -> Invoice:
        return Invoice(order.id, order.total)

    sys.exit(asyncio.run(app.run()))

See ``docs/applications.md``.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import os
import signal
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from broker.app.lease import DEFAULT_MAX_LEASE
from broker.app.parameters import read_signature
from broker.app.partitioned import DEFAULT_MAX_IN_FLIGHT, PartitionedReceiver
from broker.app.subscriber import AckPolicy, Middleware, Subscriber
from broker.backend import DEFAULT_PING_TIMEOUT, Backend
from broker.connect import connect
from broker.errors import ConfigError
from broker.interfaces import Publisher
from broker.message import Message
from broker.retry import RetryPolicy
from broker.run import handling_signals, serve_consumers

if TYPE_CHECKING:
    from broker.app.testing import AppTest

__all__ = ["DEFAULT_BACKEND", "ENV_URL", "App"]

log = logging.getLogger("broker.app")

#: The environment variable an ``App()`` built with no URL reads its default backend from.
ENV_URL = "POLYBROKER_URL"
#: The name of the backend given positionally (or by ``POLYBROKER_URL``); subscribers use it by default.
DEFAULT_BACKEND = "default"

F = TypeVar("F", bound=Callable[..., Any])
Hook = Callable[[], Awaitable[None] | None]


def _check_spec(name: str, spec: Any) -> str | Mapping[str, Any]:
    if isinstance(spec, str) and spec:
        return spec
    if isinstance(spec, Mapping):
        return spec
    raise ConfigError(f"backend {name!r} needs a URL or a settings mapping, got {spec!r}")


def _check_middleware(layer: Any) -> Middleware:
    call = type(layer).__call__ if callable(layer) else None
    if not inspect.iscoroutinefunction(layer) and not inspect.iscoroutinefunction(call):
        raise ConfigError(
            f"middleware must be an async function (delivery, call_next) -> result, got {layer!r}"
        )
    checked: Middleware = layer
    return checked


def _check_telemetry(telemetry: bool | Mapping[str, Any]) -> dict[str, Any] | None:
    """``App(telemetry=...)`` as :func:`broker.telemetry.instrument`'s keyword arguments (None: off);
    ``ConfigError`` for a value or a keyword it does not take."""
    if telemetry is False:
        return None
    if telemetry is True:
        return {}
    if not isinstance(telemetry, Mapping):
        raise ConfigError(
            f"telemetry must be True, False or a mapping of instrument()'s options, got {telemetry!r}"
        )
    from broker.telemetry import instrument

    known = set(inspect.signature(instrument).parameters) - {"backend"}
    unknown = sorted(set(telemetry) - known)
    if unknown:
        raise ConfigError(
            f"telemetry takes broker.telemetry.instrument()'s options ({', '.join(sorted(known))}), "
            f"not {', '.join(unknown)}"
        )
    return dict(telemetry)


class App:
    """An application: subscribers declared by decorator, hooks, and the backends they use.

    ``App(url_or_settings)`` names the default backend by URL or settings mapping (as
    :func:`broker.connect` takes them); with neither, ``POLYBROKER_URL`` from the environment
    (``ConfigError`` naming it when it is unset). More backends are named by keyword:
    ``App("nats://...", events="kafka://...")`` or ``App(default="nats://...", events=...)``;
    ``@app.subscriber(..., backend="events")`` and ``publish_backend="events"`` choose them.
    ``middleware`` runs around every subscriber's deliveries, outermost first (see
    :data:`broker.app.subscriber.Middleware`). ``telemetry=True`` instruments every backend with
    :func:`broker.telemetry.instrument` (tracing, metrics, health: the ``otel`` extra) and runs every
    subscriber's deliveries through its tracing and metrics stage, the outermost of the pipeline; a
    mapping passes it options (``{"tracer_provider": ..., "prometheus": ...}``). Backends are connected when
    the app starts (:meth:`run`, :meth:`lifespan`, :meth:`testing`).
    """

    def __init__(
        self,
        url_or_settings: str | Mapping[str, Any] | None = None,
        *,
        middleware: Sequence[Middleware] = (),
        telemetry: bool | Mapping[str, Any] = False,
        **named_backends: str | Mapping[str, Any],
    ) -> None:
        specs: dict[str, str | Mapping[str, Any]] = {}
        if url_or_settings is not None:
            if DEFAULT_BACKEND in named_backends:
                raise ConfigError(f"give the default backend once: positionally or as {DEFAULT_BACKEND}=")
            specs[DEFAULT_BACKEND] = _check_spec(DEFAULT_BACKEND, url_or_settings)
        for name, spec in named_backends.items():
            specs[name] = _check_spec(name, spec)
        if DEFAULT_BACKEND not in specs:
            env = os.environ.get(ENV_URL)
            if env:
                specs[DEFAULT_BACKEND] = env
            elif not specs:
                raise ConfigError(
                    f"App() needs a broker: pass a URL or settings mapping, or set {ENV_URL} (it is unset)"
                )
        #: The backends by name, as URLs or settings mappings.
        self.backend_specs: dict[str, str | Mapping[str, Any]] = specs
        #: The subscribers, in the order they were declared.
        self.subscribers: list[Subscriber] = []
        self._startup: list[Hook] = []
        self._shutdown: list[Hook] = []
        self._backends: dict[str, Backend] = {}
        self._publishers: dict[str, Publisher] = {}
        self._on_connect: list[Callable[[Backend], None]] = []
        self._observers: list[Callable[[Subscriber, Message], None]] = []
        self._running = False
        self._middleware: list[Middleware] = [_check_middleware(m) for m in middleware]
        self._provider: Any = None
        self._stages: list[Any] = []  # the tracing and metrics stages of the running subscribers
        #: The keyword arguments of :func:`broker.telemetry.instrument` for every backend (None: off).
        self.telemetry: dict[str, Any] | None = _check_telemetry(telemetry)

    def __repr__(self) -> str:
        return f"<App {', '.join(self.backend_specs)}: {len(self.subscribers)} subscribers>"

    # -- declaring ----------------------------------------------------------------------------
    def subscriber(
        self,
        topic: str,
        subscription: str,
        *,
        concurrency: int = 1,
        retry: RetryPolicy | None = None,
        ack: AckPolicy = "auto",
        backend: str = DEFAULT_BACKEND,
        publish_to: str | None = None,
        publish_backend: str | None = None,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        max_lease: float | None = DEFAULT_MAX_LEASE,
        middleware: Sequence[Middleware] = (),
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorate a handler (``async def`` or plain ``def``) consuming ``topic`` through ``subscription``.

        Its parameters are bound by annotation (see :mod:`broker.app.parameters`); one that cannot be
        is a ``ConfigError`` here. ``concurrency`` handlers run at a time (plain functions in worker
        threads). ``ack="auto"`` acks on return and leaves an exception to ``retry`` (or the
        receiver's nack backoff); ``"manual"`` leaves settling to the handler. ``publish_to``
        publishes the return value (None: nothing) to that topic on ``publish_backend`` (default:
        ``backend``). A ``list[T]`` payload takes batches of up to ``batch_size`` (0: the backend's
        default) within ``batch_timeout`` seconds. While a handler runs, its message's deadline is
        extended (``in_progress()``, on backends that have it) for up to ``max_lease`` seconds
        (None: never). ``middleware`` runs inside the app's, around this subscriber's deliveries.
        ``options`` are the backend's consumer options. The handler is returned unchanged.
        """
        if not isinstance(topic, str) or not topic or not isinstance(subscription, str) or not subscription:
            raise ConfigError(
                f"a subscriber needs a topic and a subscription name, got {topic!r}, {subscription!r}"
            )
        if ack not in ("auto", "manual"):
            raise ConfigError(f"ack must be 'auto' or 'manual', got {ack!r}")
        if not isinstance(concurrency, int) or isinstance(concurrency, bool) or concurrency < 1:
            raise ConfigError(f"concurrency must be an int >= 1, got {concurrency!r}")
        if max_lease is not None and not max_lease > 0:
            raise ConfigError(f"max_lease must be > 0 seconds or None, got {max_lease!r}")
        self._check_common(retry, backend, publish_backend)

        own_middleware = tuple(_check_middleware(m) for m in middleware)

        def register(handler: F) -> F:
            signature = read_signature(handler)
            if signature.batch and retry is not None and retry.mode == "ordered":
                raise ConfigError("a batch subscriber cannot retry in place: use mode='unordered'")
            self.subscribers.append(
                Subscriber(
                    handler,
                    topic,
                    subscription,
                    signature,
                    concurrency=concurrency,
                    retry=retry,
                    ack=ack,
                    backend=backend,
                    publish_to=publish_to,
                    publish_backend=publish_backend,
                    batch_size=batch_size,
                    batch_timeout=batch_timeout,
                    max_lease=max_lease,
                    options=dict(options),
                    middleware=own_middleware,
                )
            )
            return handler

        return register

    def records(
        self,
        topics: str | Sequence[str],
        group: str,
        *,
        per_key: bool = False,
        concurrency: int = 16,
        max_in_flight: int = DEFAULT_MAX_IN_FLIGHT,
        retry: RetryPolicy | None = None,
        backend: str = DEFAULT_BACKEND,
        publish_to: str | None = None,
        publish_backend: str | None = None,
        middleware: Sequence[Middleware] = (),
        **options: Any,
    ) -> Callable[[F], F]:
        """Decorate a handler of the records of partitioned logs ``topics``, read in consumer group ``group``.

        Records of one partition are handled in order, partitions in parallel (``per_key``: records
        of one key in order, keys in parallel), at most ``concurrency`` handlers at a time and
        ``max_in_flight`` records read ahead. Each partition is committed up to its lowest
        unfinished record, never past it. A handler that raises is retried in place by ``retry``
        (its backoff; after ``max_attempts`` or on a non-retryable error the record goes to its
        :class:`~broker.DeadLetterTopic`); without a dead-letter topic a failing record is retried
        for ever and holds its partition (a log has no nack: nothing is skipped). Parameters are
        bound as for :meth:`subscriber`, with ``Record`` for the delivery. ``options`` are the
        backend's ``records()`` options.
        """
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names or not all(isinstance(t, str) and t and "," not in t for t in names):
            raise ConfigError(f"records need topic names (without commas), got {topics!r}")
        if not isinstance(group, str) or not group:
            raise ConfigError(f"records need a consumer group name, got {group!r}")
        self._check_common(retry, backend, publish_backend)
        PartitionedReceiver(None, concurrency=concurrency, max_in_flight=max_in_flight)  # checks them
        own_middleware = tuple(_check_middleware(m) for m in middleware)

        def register(handler: F) -> F:
            self.subscribers.append(
                Subscriber(
                    handler,
                    ",".join(names),
                    group,
                    read_signature(handler, records=True),
                    concurrency=concurrency,
                    retry=retry,
                    backend=backend,
                    publish_to=publish_to,
                    publish_backend=publish_backend,
                    max_lease=None,
                    options=dict(options),
                    middleware=own_middleware,
                    records=True,
                    per_key=bool(per_key),
                    max_in_flight=max_in_flight,
                )
            )
            return handler

        return register

    def _check_common(self, retry: Any, backend: str, publish_backend: str | None) -> None:
        if retry is not None and not isinstance(retry, RetryPolicy):
            raise ConfigError(f"retry must be a broker.RetryPolicy, got {retry!r}")
        for name in (backend, publish_backend):
            if name is not None and name not in self.backend_specs:
                raise ConfigError(
                    f"no backend named {name!r} in this app (it has {', '.join(sorted(self.backend_specs))})"
                )

    def middleware(self, layer: F) -> F:
        """Add ``layer`` (``async def layer(delivery, call_next)``) around every subscriber, inside
        the middleware given before; returns it unchanged. Added before the app starts."""
        if self._running:
            raise ConfigError("middleware is added before the app starts")
        self._middleware.append(_check_middleware(layer))
        return layer

    @property
    def dependency_provider(self) -> Any:
        """The FastDepends ``Provider`` of this app's ``Depends()`` parameters: ``.override(dep, fake)``
        replaces a dependency (in tests); needs the ``depends`` extra."""
        if self._provider is None:
            from broker.app.depends import new_provider

            self._provider = new_provider()
        return self._provider

    def on_startup(self, hook: F) -> F:
        """Call ``hook()`` (sync or async) after the backends answered, before any subscriber starts."""
        self._startup.append(hook)
        return hook

    def on_shutdown(self, hook: F) -> F:
        """Call ``hook()`` (sync or async) after the subscribers drained, before the backends close."""
        self._shutdown.append(hook)
        return hook

    # -- what a running app offers ------------------------------------------------------------
    def backend(self, name: str = DEFAULT_BACKEND) -> Backend:
        """The connected backend ``name`` (``ConfigError`` before the app started)."""
        found = self._backends.get(name)
        if found is None:
            raise ConfigError(f"backend {name!r} is not connected: the app is not running")
        return found

    def publisher(self, name: str = DEFAULT_BACKEND) -> Publisher:
        """The shared publisher of backend ``name`` (one per backend for the whole app)."""
        found = self._publishers.get(name)
        if found is None:
            found = self._publishers[name] = self.backend(name).publisher()
        return found

    # -- running ------------------------------------------------------------------------------
    async def run(
        self,
        *,
        drain_timeout: float = 30.0,
        signals: Sequence[int] = (signal.SIGTERM, signal.SIGINT),
        ping_timeout: float | None = DEFAULT_PING_TIMEOUT,
    ) -> int:
        """Run until SIGTERM/SIGINT (as :func:`broker.run`: ping first, drain for ``drain_timeout``
        seconds, close); the exit code (0 clean, 1 when a subscriber failed)."""
        stop = asyncio.Event()
        async with self._serving(drain_timeout, signals, stop, ping_timeout) as task:
            return await task

    @contextlib.asynccontextmanager
    async def lifespan(
        self, *, drain_timeout: float = 30.0, ping_timeout: float | None = DEFAULT_PING_TIMEOUT
    ) -> AsyncIterator[App]:
        """Start the subscribers for the block; on exit drain them (``drain_timeout`` seconds) and close.

        Installs no signal handler, so a host (an ASGI server's lifespan) keeps its own.
        """
        stop = asyncio.Event()
        async with self._serving(drain_timeout, (), stop, ping_timeout) as task:
            try:
                yield self
            finally:
                stop.set()
                code = await task
                if code:
                    log.error("a subscriber failed while the app ran (see the errors above)")

    def testing(
        self, *, virtual_time: bool = True, ack_deadline: float | None = None, url: str | None = None
    ) -> AppTest:
        """An async context manager running this app on fresh ``inmem://`` brokers (one per backend
        name), in virtual time unless ``virtual_time=False``, with a publish recorder; on the real
        broker ``url`` (default: ``POLYBROKER_TEST_URL``) when one is named, in real time: see
        :class:`broker.app.testing.AppTest`."""
        from broker.app.testing import AppTest

        return AppTest(self, virtual_time=virtual_time, ack_deadline=ack_deadline, url=url)

    @contextlib.asynccontextmanager
    async def _serving(
        self,
        drain_timeout: float,
        signals: Sequence[int],
        stop: asyncio.Event,
        ping_timeout: float | None,
        specs: Mapping[str, str | Mapping[str, Any]] | None = None,
    ) -> AsyncIterator[asyncio.Task[int]]:
        if self._running:
            raise ConfigError("this app is running already")
        if drain_timeout < 0:
            raise ConfigError(f"drain_timeout must be >= 0, got {drain_timeout}")
        self._running = True
        force = asyncio.Event()
        # handled from the start, so a signal while the app connects or runs its startup hooks
        # drains it (the subscribers then stop at once) instead of killing the process
        with handling_signals(signals, stop, force, drain_timeout):
            async with self._served(drain_timeout, stop, force, ping_timeout, specs) as task:
                yield task

    @contextlib.asynccontextmanager
    async def _served(
        self,
        drain_timeout: float,
        stop: asyncio.Event,
        force: asyncio.Event,
        ping_timeout: float | None,
        specs: Mapping[str, str | Mapping[str, Any]] | None,
    ) -> AsyncIterator[asyncio.Task[int]]:
        try:
            await self._connect(specs or self.backend_specs, ping_timeout)
            try:
                await self._call_hooks(self._startup, "on_startup")
                self._stages = []
                pairs = []
                stage_of: dict[int, Any] = {}  # a pair's index -> its tracing and metrics stage
                for subscriber in self.subscribers:
                    staged = len(self._stages)
                    pairs.append(self._consumer(subscriber))
                    if len(self._stages) > staged:
                        stage_of[len(pairs) - 1] = self._stages[-1]

                def failed(index: int, error: BaseException) -> None:
                    stage = stage_of.get(index)
                    if stage is not None:  # health() names the broker error that ended it
                        stage.health.failure(error)

                async with contextlib.AsyncExitStack() as entered:
                    for receiver, _ in pairs:
                        if hasattr(receiver, "__aenter__"):
                            # entering makes the subscription exist where it does that; leaving
                            # (after the drain) releases what the receiver holds
                            await entered.enter_async_context(receiver)
                    for stage in self._stages:  # health and backlog polling while subscribers run
                        stage.consuming()
                        entered.push_async_callback(stage.stopped, closed=True)
                    task = asyncio.create_task(
                        serve_consumers(
                            pairs,
                            backends=(),
                            drain_timeout=drain_timeout,
                            stop=stop,
                            force=force,
                            close_timeout=0.0,
                            on_failure=failed,
                        )
                    )
                    try:
                        yield task
                    finally:
                        if not task.done():
                            stop.set()
                        with contextlib.suppress(Exception):
                            await asyncio.shield(task)
                    await self._call_hooks(self._shutdown, "on_shutdown")
            finally:
                await self._close()
        finally:
            self._running = False

    def _consumer(self, subscriber: Subscriber) -> tuple[Any, Callable[[Any], Awaitable[None]]]:
        observers = self._observers
        observe = None
        if observers:

            def observe(source: Subscriber, message: Message) -> None:
                for observer in observers:
                    observer(source, message)

        provider = self.dependency_provider if subscriber.signature.depends else None
        backend: Any = self.backend(subscriber.backend)
        stage = None
        if self.telemetry is not None:
            from broker.telemetry import InstrumentedBackend

            if isinstance(backend, InstrumentedBackend):
                # tracing and metrics are a stage of the pipeline, over the backend's own consumers
                kind = "records" if subscriber.records else "receiver"
                if subscriber.signature.batch:
                    kind = "batched_receiver"
                stage = backend.stage(subscriber.topic, subscriber.subscription, kind)
                self._stages.append(stage)
                backend = backend.wrapped
        return subscriber.consumer(
            backend,
            self.publisher,
            observe,
            middleware=self._middleware,
            provider=provider,
            telemetry=stage,
        )

    async def _connect(
        self, specs: Mapping[str, str | Mapping[str, Any]], ping_timeout: float | None
    ) -> None:
        for name, spec in specs.items():
            backend = connect(spec)
            if self.telemetry is not None:
                from broker.telemetry import instrument

                backend = instrument(backend, **self.telemetry)
            self._backends[name] = backend
            for hook in self._on_connect:
                hook(backend)
        if ping_timeout is None:
            return
        results = await asyncio.gather(
            *(b.ping(ping_timeout) for b in self._backends.values()), return_exceptions=True
        )
        failures = [r for r in results if isinstance(r, BaseException)]
        if failures:
            await self._close()
            raise failures[0]

    async def _close(self) -> None:
        backends = list(self._backends.values())
        self._backends.clear()
        self._publishers.clear()
        for backend in backends:
            try:
                await backend.close()
            except Exception as exc:
                log.error("closing the %s backend failed: %r", backend.name, exc)

    async def _call_hooks(self, hooks: list[Hook], what: str) -> None:
        for hook in hooks:
            result = hook()
            if inspect.isawaitable(result):
                await result

    def _test_specs(self, ack_deadline: float | None) -> dict[str, str]:
        run = uuid.uuid4().hex[:12]
        query = f"?ack_deadline={ack_deadline}" if ack_deadline is not None else ""
        return {name: f"inmem://app-test-{run}-{name}{query}" for name in self.backend_specs}
