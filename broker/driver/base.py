"""``BackendBase``: what every backend shares, and ``BackendFactory``, what a backend registers.

A backend package registers a :class:`BackendFactory` under the ``broker.backends``
entry-point group; :func:`broker.connect` finds it by URL scheme. The factory's module must
import no SDK: :meth:`BackendFactory.open` imports it and raises
:class:`~broker.errors.MissingDependency` when it is absent. The backend it opens subclasses
:class:`BackendBase`, which gives it resource tracking, an idempotent close and the portable
adapters (batched consumers, receivers) over the native consumers it implements.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from broker import adapt
from broker.adapt.receivers import DEFAULT_DRAIN_TIMEOUT, NackDelay
from broker.backend import DEFAULT_PING_TIMEOUT, Backend, FaultInjection
from broker.backoff import DEFAULT_BACKOFF
from broker.capabilities import Capabilities
from broker.driver.options import check_batching, check_receiver_options
from broker.driver.provision import Provision, check_provision
from broker.driver.publishing import DriverPublisher
from broker.driver.resources import AsyncResource
from broker.driver.settings import ParsedUrl
from broker.errors import (
    BrokerError,
    ClosedError,
    ConfigError,
    ConnectionFailed,
    NotSupported,
    ProvisioningError,
)
from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    DrainingReceiver,
    MessageIterator,
    MiddlewarePublisher,
    Publisher,
    RecordIterator,
    TransactionalPublisher,
)
from broker.retry import DeadLetterTopic, RetryPolicy

if TYPE_CHECKING:
    from broker.log import Log

__all__ = ["BackendBase", "BackendFactory", "Batching", "topics_tuple"]

_Driver = TypeVar("_Driver")

#: The resource list is swept of closed resources whenever it grows past this many (or twice the
#: number left open at the last sweep), so it stays within a constant factor of what is open.
_SWEEP_AT = 64


class BackendFactory(Protocol):
    """What a backend registers under the ``broker.backends`` entry-point group.

    :class:`broker.driver.registration.BackendRegistration` is a base class with the shared parts.
    """

    #: The pip extra that installs the backend's SDK (named in ``MissingDependency``).
    extra: str

    @property
    def settings_type(self) -> type[Any]:
        """The settings dataclass that URL query parameters and mapping keys fill."""

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Settings named by the URL's hosts, path and credentials (the query is added by ``connect``)."""

    def open(self, settings: Any) -> Backend:
        """A backend for ``settings``; imports the SDK (``MissingDependency`` when it is absent)."""

    # Optional: ``dev_server(port: int | None = None) -> broker.driver.devserver.DevServer`` starts a local
    # server for development (``broker dev SCHEME``) and tests; not started until entered/started.


@dataclass(frozen=True, slots=True)
class Batching:
    """How a batched consumer batches: up to ``size`` items, waiting ``timeout`` seconds at most."""

    size: int
    timeout: float


class BackendBase(AsyncResource):
    """Shared behaviour for backends: resource tracking, idempotent close, adapter defaults.

    Subclasses implement what is native to their broker and call :meth:`_track` on every
    resource they hand out; what they leave out comes from :mod:`broker.adapt` or raises
    :class:`~broker.errors.NotSupported`.

    Publishers are cheap: a subclass makes one publish driver (its SDK client) with
    :meth:`_shared_driver` and hands each publisher a shared view of it (``DriverPublisher(driver,
    shared=True)``). The backend holds those publishers weakly (one dropped without ``close()`` holds
    nothing the backend's close must release: the driver is the backend's) and every other resource
    strongly until it is closed; a closed resource leaves the list.
    """

    name: str = "backend"
    capabilities: Capabilities = Capabilities()
    #: See :class:`Backlog`: whether :meth:`backlog` counts messages delivered and not yet acked.
    backlog_counts_in_flight: bool = True
    #: The ``provision`` modes (:mod:`broker.driver.provision`) this backend implements; settings
    #: asking for another are a ``ConfigError`` at construction (:meth:`_check_provision`).
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create",)
    #: The ``provision`` mode in force, set by :meth:`_check_provision` from the settings.
    provision: Provision = "create"

    def __init__(self) -> None:
        self._resources: list[Any] = []
        self._sweep_at = _SWEEP_AT
        #: Publishers over the shared driver, held weakly (see the class docstring).
        self._publishers: weakref.WeakSet[DriverPublisher] = weakref.WeakSet()
        #: The publish driver every shared publisher uses (made by :meth:`_shared_driver`).
        self._publish_driver: Any = None
        self._closed = False

    @property
    def resources(self) -> tuple[Any, ...]:
        """The publishers and consumers handed out and not closed yet: what :meth:`close` closes."""
        return (*(r for r in self._resources if not _is_closed(r)), *self._publishers)

    def _check_provision(self) -> Provision:
        """Read ``self.settings.provision`` and keep it as :attr:`provision`: a backend calls this in
        its ``__init__`` as soon as it has its settings, before it connects or creates anything.

        A mode this backend does not implement (see :attr:`provision_modes`) raises
        :class:`~broker.errors.ConfigError` naming the backend and the modes it offers: a backend
        never falls back to ``create`` on its own.
        """
        mode = getattr(getattr(self, "settings", None), "provision", "create")
        self.provision = check_provision(self.name, mode, self.provision_modes)
        return self.provision

    async def missing_resources(self) -> Sequence[str]:
        """Hook: the resources the settings name (topics, queues, streams, subscriptions) that do
        not exist on the broker, each described for a person (``"topic 'orders'"``).

        :meth:`ping` calls it under ``provision="verify"`` and raises
        :class:`~broker.errors.ProvisioningError` when it names any. The default names none: a
        backend that declares ``"verify"`` in :attr:`provision_modes` overrides it.
        """
        return ()

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self.name} backend is closed")

    #: Called with every publisher handed out (see :meth:`on_publisher`); empty on most backends.
    _publisher_hooks: tuple[Callable[[Publisher], None], ...] = ()

    def _track(self, resource: Any) -> Any:
        """Hand out ``resource``: the backend's close closes it unless it was closed before.

        A shared publisher is held weakly; a :class:`DriverPublisher` leaves the list as it closes;
        other resources are swept from it once closed (see :data:`_SWEEP_AT`).
        """
        self._check_open()
        if isinstance(resource, DriverPublisher):
            if resource.shared:
                self._publishers.add(resource)
                resource._on_close.append(self._publishers.discard)
            else:
                self._resources.append(resource)
                resource._on_close.append(self._untrack)
            for hook in self._publisher_hooks:
                hook(resource)
            return resource
        if len(self._resources) >= self._sweep_at:
            self._resources = [r for r in self._resources if not _is_closed(r)]
            self._sweep_at = max(_SWEEP_AT, 2 * len(self._resources))
        self._resources.append(resource)
        return resource

    def _untrack(self, resource: Any) -> None:
        """Drop a closed ``resource`` from the list (nothing when it is not there)."""
        try:
            self._resources.remove(resource)
        except ValueError:
            pass

    def _shared_driver(self, make: Callable[[], _Driver]) -> _Driver:
        """The publish driver every publisher of this backend shares, made by ``make`` on first use.

        The backend's :meth:`close` closes it after the publishers.
        """
        self._check_open()
        if self._publish_driver is None:
            self._publish_driver = make()
        return self._publish_driver  # type: ignore[no-any-return]

    def on_publisher(self, hook: Callable[[Publisher], None]) -> None:
        """Call ``hook`` with every publisher this backend handed out and will hand out.

        A hook typically adds send middleware (``publisher.wrap_send``) or an interceptor to each
        one, as the test kit's publish recorder does; publishers that do not go through
        :class:`broker.driver.publishing.DriverPublisher` are not passed.
        """
        self._publisher_hooks = (*self._publisher_hooks, hook)
        for resource in (*self._resources, *self._publishers):
            if isinstance(resource, DriverPublisher):
                hook(resource)

    def _not_supported(self, what: str) -> NotSupported:
        return NotSupported(
            f"the {self.name} backend has no {what}; see its capabilities: {self.capabilities}"
        )

    def publisher(self) -> MiddlewarePublisher:
        """A publisher (see :class:`Backend`)."""
        raise self._not_supported("publisher")

    def transactional_publisher(self, **options: Any) -> TransactionalPublisher:
        """A transactional publisher (see :class:`Backend`)."""
        raise self._not_supported("transactions")

    def log(self) -> Log:
        """The :mod:`broker.log` port (see :class:`Backend`); ``NotSupported`` unless the backend has one."""
        self._check_open()
        raise self._not_supported("partitioned-log port (broker.log)")

    def queue_tracker(self, topic: str, **options: Any) -> Any:
        """The marker queue's redelivery tracker (see :class:`Backend`); ``NotSupported`` unless the
        backend's ``messages()`` run on a marker queue."""
        self._check_open()
        raise self._not_supported("marker queue (it acks messages natively)")

    @property
    def faults(self) -> FaultInjection:
        """Fault injection (see :class:`Backend`): on a backend without it, setting a fault raises
        ``NotSupported`` (reading the property does not, so ``isinstance(b, Backend)`` holds)."""
        return _NoFaults(self._not_supported("fault injection (use the in-memory backend)"))

    # -- consumers: the portable shells over a backend's ``_open_*`` hooks ---------------------
    def _consumer_options(self, options: dict[str, Any]) -> Any:
        """Hook: the backend's consumer options, ``options`` over the connection's defaults.

        Unknown names raise :class:`~broker.errors.ConfigError`. The default accepts none.
        """
        if options:
            raise ConfigError(f"unknown consumer options for {self.name}: {', '.join(sorted(options))}")
        return None

    def _message_options(self, options: dict[str, Any]) -> Any:
        """Hook: the consumer options of ``messages()`` (default: those of :meth:`_consumer_options`)."""
        return self._consumer_options(options)

    def _record_options(self, options: dict[str, Any]) -> Any:
        """Hook: the consumer options of ``records()`` (default: those of :meth:`_consumer_options`)."""
        return self._consumer_options(options)

    def _open_messages(self, topic: str, subscription: str, options: Any, batching: Batching | None) -> Any:
        """Hook: a new per-message consumer (``batching`` None) or batched consumer, not tracked yet."""
        raise self._not_supported("per-message consumption")

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: Any, batching: Batching | None
    ) -> Any:
        """Hook: a new record consumer of ``group`` (``batching`` None) or batched one, not tracked yet."""
        raise self._not_supported("partitioned-log consumption")

    def _group_name(self, group: str | None) -> str:
        """Hook: the consumer group to join (``ConfigError`` when none is given)."""
        if not group:
            raise ConfigError("a consumer group name is needed")
        return group

    def _batching(self, options: Any, batch_size: int, batch_timeout: float) -> Batching:
        # every backend's consumer options name their default batch size ``batch_size``
        return Batching(batch_size or getattr(options, "batch_size", None) or 100, batch_timeout)

    def messages(self, topic: str, subscription: str, **options: Any) -> MessageIterator:
        """Per-message consumption (see :class:`Backend`): the backend's consumer, tracked for close."""
        self._check_open()
        opts = self._message_options(options)
        return self._track(self._open_messages(topic, subscription, opts, None))  # type: ignore[no-any-return]

    def batched_messages(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> BatchedMessageIterator:
        """Batches of up to ``batch_size`` (0: the backend's default); waits ``batch_timeout`` at most.

        (A backend without native batches returns :func:`broker.adapt.batched_messages` over its
        per-message consumer from its hook.)
        """
        self._check_open()
        check_batching(batch_size, batch_timeout)
        opts = self._message_options(options)
        batching = self._batching(opts, batch_size, batch_timeout)
        return self._track(self._open_messages(topic, subscription, opts, batching))  # type: ignore[no-any-return]

    def receiver(
        self,
        topic: str,
        subscription: str,
        *,
        concurrency: int = 1,
        nack_delay: NackDelay = DEFAULT_BACKOFF,
        retry: RetryPolicy | None = None,
        drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
        **options: Any,
    ) -> DrainingReceiver:
        """A receiver over :meth:`messages` with ``concurrency`` workers.

        A failed handler's messages are nacked with ``nack_delay``: by default a bounded
        exponential backoff by delivery attempt (see :class:`broker.backoff.Backoff`). With
        ``retry`` a :class:`broker.RetryPolicy` decides instead (retries, dead-lettering, error
        threshold; a ``DeadLetterTopic`` without a publisher uses this backend's). ``stop()`` on the
        receiver drains it, letting running handlers finish for up to ``drain_timeout`` seconds.
        Bad values raise :class:`~broker.errors.ConfigError` here
        (:func:`broker.driver.options.check_receiver_options`).
        """
        check_receiver_options(
            concurrency=concurrency, nack_delay=nack_delay, drain_timeout=drain_timeout, retry=retry
        )
        publisher = self._publisher_for_retry(retry)
        return adapt.receiver(
            self.messages(topic, subscription, **options),
            concurrency,
            nack_delay,
            retry=retry,
            drain_timeout=drain_timeout,
            publisher=publisher,
            topic=topic,
            subscription=subscription,
        )

    def _publisher_for_retry(self, retry: RetryPolicy | None) -> Publisher | None:
        """A publisher of this backend for ``retry``'s dead-letter topic when it names none itself
        (None when there is no such topic)."""
        if retry is not None and isinstance(retry.dead_letter, DeadLetterTopic):
            if retry.dead_letter.publisher is None:
                return self.publisher()
        return None

    def records(
        self, topics: str | Sequence[str], group: str | None = None, **options: Any
    ) -> RecordIterator:
        """Partitioned-log consumption (see :class:`Backend`): the backend's consumer, tracked for close."""
        self._check_open()
        names = topics_tuple(topics)
        group = self._group_name(group)
        opts = self._record_options(options)
        return self._track(self._open_records(names, group, opts, None))  # type: ignore[no-any-return]

    def batched_records(
        self,
        topics: str | Sequence[str],
        group: str | None = None,
        *,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> BatchedIterator:
        """Batches of up to ``batch_size`` records (0: the backend's default) within ``batch_timeout``."""
        self._check_open()
        check_batching(batch_size, batch_timeout)
        names = topics_tuple(topics)
        group = self._group_name(group)
        opts = self._record_options(options)
        batching = self._batching(opts, batch_size, batch_timeout)
        return self._track(self._open_records(names, group, opts, batching))  # type: ignore[no-any-return]

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """How many messages of ``subscription`` are not consumed yet (see :class:`Backlog`).

        The default returns None (the broker does not say): asking is never an error, so callers
        need no capability check. Backends whose broker reports a figure override this.
        """
        self._check_open()
        return None

    async def ping(self, timeout: float = DEFAULT_PING_TIMEOUT) -> None:
        """Dial the broker, authenticate and get an answer within ``timeout`` seconds (see :class:`Backend`).

        The backend's :meth:`_ping` does the round trip; a broker that gives no answer within
        ``timeout`` is unreachable as far as the caller can tell: ``ConnectionFailed`` (retryable),
        with the backend's last error chained. Errors of the broker pass through typed
        (``AuthenticationFailed`` for refused credentials, a subclass of ``ConnectionFailed``).
        """
        if not timeout > 0:
            raise ConfigError(f"timeout must be > 0 seconds, got {timeout}")
        self._check_open()
        try:
            async with asyncio.timeout(timeout):
                await self._ping(timeout)
                missing = await self.missing_resources() if self.provision == "verify" else ()
        except ConnectionFailed:
            raise
        except TimeoutError as exc:  # the deadline, or a backend's own Timeout inside it
            detail = f": {exc}" if isinstance(exc, BrokerError) else ""
            raise ConnectionFailed(
                f"the {self.name} broker gave no answer within {timeout}s{detail}"
            ) from exc
        if missing:
            raise ProvisioningError(self.name, missing)

    async def _ping(self, timeout: float) -> None:
        """Hook: one round trip to the broker that needs the credentials (the default has no broker
        to ask and returns at once); :meth:`ping` bounds it by ``timeout`` seconds."""

    async def _close_connection(self) -> None:
        """Close the backend's own connection, after every resource was closed."""

    async def close(self) -> None:
        """Close everything handed out, then the connection. Idempotent."""
        if self._closed:
            return
        self._closed = True
        resources, self._resources = self._resources, []
        publishers, self._publishers = list(self._publishers), weakref.WeakSet()
        for publisher in publishers:
            publisher._closed_now()  # the driver's close below flushes (or fails) their sends
        results: list[Any] = await asyncio.gather(
            *(r.close() for r in reversed(resources)), return_exceptions=True
        )
        driver, self._publish_driver = self._publish_driver, None
        if driver is not None:
            try:
                await driver.close()
            except Exception as exc:
                results.append(exc)
        await self._close_connection()
        for result in results:
            if isinstance(result, Exception):
                raise result


class _NoFaults:
    """The ``faults`` of a backend without fault injection: setting a fault raises ``NotSupported``."""

    injected = 0
    active = False

    def __init__(self, error: NotSupported) -> None:
        self._error = error

    def fail_publishes(self, count: int = 1, error: Any = None, *, topic: str | None = None) -> None:
        """Raise ``NotSupported``."""
        raise self._error

    def drop_connection(self, error: Any = None) -> None:
        """Raise ``NotSupported``."""
        raise self._error

    def reconnect(self) -> None:
        """Raise ``NotSupported``."""
        raise self._error

    def slow_consumer(self, subscription: str | None = None, delay: float = 1.0) -> None:
        """Raise ``NotSupported``."""
        raise self._error

    def clear(self) -> None:
        """Nothing to clear: no fault can be set."""


def _is_closed(resource: Any) -> bool:
    """Whether ``resource`` says it is closed (its ``closed`` property, else its ``_closed`` flag)."""
    closed = getattr(resource, "closed", None)
    if not isinstance(closed, bool):
        closed = getattr(resource, "_closed", False)
    return closed is True


def topics_tuple(topics: str | Sequence[str]) -> tuple[str, ...]:
    """``topics`` as a tuple; a comma-separated string names several topics."""
    if isinstance(topics, str):
        names = tuple(t.strip() for t in topics.split(",") if t.strip())
    else:
        names = tuple(topics)
    if not names:
        raise ValueError("at least one topic is needed")
    return names
