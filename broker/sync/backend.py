"""``broker.sync.connect``: a blocking backend over the async one, which lives on the portal's loop."""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

from broker.backend import Backend
from broker.capabilities import Capabilities
from broker.connect import _split
from broker.driver.options import check_count, check_seconds
from broker.errors import ClosedError, ConfigError
from broker.sync import portal as _portal
from broker.sync.consuming import SyncMessages, SyncRecords
from broker.sync.portal import DEFAULT_CLOSE_TIMEOUT, DEFAULT_TIMEOUT, Closing, check_not_in_loop, generation
from broker.sync.publishing import SyncPublisher

if TYPE_CHECKING:
    from broker.typed.binding import Binding

__all__ = ["SyncBackend", "connect"]

T = TypeVar("T")
#: A blocking consumer class.
C = TypeVar("C", bound=SyncMessages | SyncRecords)

#: How many messages (or records) a consumer reads ahead of its caller by default.
DEFAULT_READ_AHEAD = 256


def connect(
    target: str | Mapping[str, Any],
    *,
    timeout: float = DEFAULT_TIMEOUT,
    close_timeout: float = DEFAULT_CLOSE_TIMEOUT,
) -> SyncBackend:
    """A blocking backend for ``target`` (a URL or mapping, as :func:`broker.connect` takes).

    ``timeout`` is the default of every blocking call made through it; ``close_timeout`` bounds
    :meth:`SyncBackend.close` and the flush of pending publishes at interpreter exit. Bad URLs
    raise :class:`~broker.errors.ConfigError` here; a broker that is down raises a typed error
    (:class:`~broker.errors.Timeout` or :class:`~broker.errors.ConnectionFailed`) from the first
    call that needs it, within that call's timeout.
    """
    check_seconds("timeout", timeout)
    check_seconds("close_timeout", close_timeout)
    return SyncBackend(target, timeout=timeout, close_timeout=close_timeout)


class SyncBackend(Closing):
    """A connection to one broker for blocking code: publishers and consumers without ``await``.

    Every call runs the async backend's own code on the portal's loop thread
    (:mod:`broker.sync.portal`). After ``fork`` the child re-connects on first use.
    """

    def __init__(self, target: str | Mapping[str, Any], *, timeout: float, close_timeout: float) -> None:
        check_not_in_loop("broker.sync.connect()")
        self._target = target
        #: Default timeout (seconds) of every blocking call.
        self.timeout = timeout
        #: Bound (seconds) of :meth:`close`.
        self.close_timeout = close_timeout
        self._closed = False
        self._gen = -1
        self._async: Backend | None = None
        self._resources: list[SyncPublisher | SyncMessages | SyncRecords] = []
        self._reconnect()

    def _reconnect(self) -> None:
        if self._gen != -1:  # a forked child
            _portal.abandon(self._async)  # never freed here: see portal.abandon
            _check_fork_support(self._async)
        else:
            # the backend's package is imported here, not on the loop thread; the loop thread
            # imports its SDK when it connects
            _split(self._target)
        self._async = _portal.portal().call(_open, self._target, timeout=self.timeout, what="connect()")
        self._gen = generation()
        # the resources handed out stay tracked: in a forked child they re-open on first use,
        # and close() flushes and closes those (it skips the ones never re-opened there)

    def __repr__(self) -> str:
        name = self._async.name if self._async is not None else "?"
        return f"<SyncBackend {name}{' closed' if self._closed else ''}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def name(self) -> str:
        """The URL scheme of the backend (``inmem``, ``kafka``, ...)."""
        return self._async_backend().name

    @property
    def capabilities(self) -> Capabilities:
        """What the backend supports (see :class:`broker.Capabilities`)."""
        return self._async_backend().capabilities

    @property
    def async_backend(self) -> Backend:
        """The async backend underneath; use it only from coroutines run by :meth:`run`."""
        return self._async_backend()

    def _async_backend(self) -> Backend:
        if self._closed:
            raise ClosedError("the blocking backend is closed")
        if self._gen != generation():
            with _portal.reopen_lock():
                if self._gen != generation():
                    self._reconnect()  # a forked child: the parent's connection is abandoned, not closed
        assert self._async is not None
        return self._async

    def _call(
        self,
        fn: Callable[..., Awaitable[T]],
        *args: Any,
        timeout: float | None = None,
        what: str = "the call",
    ) -> T:
        return _portal.portal().call(
            fn, *args, timeout=self.timeout if timeout is None else timeout, what=what
        )

    def run(self, fn: Callable[[Backend], Awaitable[T]], *, timeout: float | None = None) -> T:
        """Run ``fn(async_backend)`` on the loop thread and return its result (an escape hatch)."""
        backend = self._async_backend()
        return self._call(fn, backend, timeout=timeout, what="run()")

    def _track(self, resource: Any) -> Any:
        self._resources.append(resource)
        return resource

    def publisher(self, *, max_pending: int = 100_000, max_batch: int = 10_000) -> SyncPublisher:
        """A blocking publisher (thread-safe): up to ``max_pending`` messages queued or in flight,
        handed to the async publisher up to ``max_batch`` at a time (docs/blocking.md, "The hand-over")."""
        check_count("max_pending", max_pending)
        check_count("max_batch", max_batch)
        self._async_backend()
        return self._track(  # type: ignore[no-any-return]
            SyncPublisher(
                self,
                timeout=self.timeout,
                close_timeout=self.close_timeout,
                max_pending=max_pending,
                max_batch=max_batch,
            )
        )

    def messages(
        self,
        topic: str,
        subscription: str,
        *,
        read_ahead: int = DEFAULT_READ_AHEAD,
        type: Binding[Any] | type[Any] | None = None,
        **options: Any,
    ) -> SyncMessages:
        """Per-message consumption of ``topic`` through ``subscription`` (see ``Backend.messages``).

        At most ``read_ahead`` messages are taken from the broker ahead of the caller; those not
        handed out when the consumer closes are nacked. With ``type`` the messages decode as in
        :func:`broker.typed.messages` (``message.decoded()``).
        """
        if self._async_backend().name in BATCHED_MESSAGES and not _BATCH_OPTIONS & options.keys():
            # Read through the backend's batched pulls: one await and one hand-over per batch.
            # (Batch options given here go to messages() as before, which says what it makes of them.)
            size = min(options.get("prefetch") or MESSAGE_BATCH, max(1, (read_ahead + 1) // 2))
            return self._consumer(
                SyncMessages,
                lambda backend: backend.batched_messages(topic, subscription, batch_size=size, **options),
                type,
                read_ahead,
            )
        return self._consumer(
            SyncMessages, lambda backend: backend.messages(topic, subscription, **options), type, read_ahead
        )

    def records(
        self,
        topics: str | Sequence[str],
        group: str,
        *,
        read_ahead: int = DEFAULT_READ_AHEAD,
        type: Binding[Any] | type[Any] | None = None,
        **options: Any,
    ) -> SyncRecords:
        """Partitioned-log consumption of ``topics`` in consumer group ``group`` (``Backend.records``)."""
        return self._consumer(
            SyncRecords, lambda backend: backend.records(topics, group, **options), type, read_ahead
        )

    def _consumer(
        self,
        kind: type[C],
        open_source: Callable[[Backend], Any],
        type: Binding[Any] | type[Any] | None,
        read_ahead: int,
    ) -> C:
        """A blocking consumer of ``kind`` over what ``open_source(async backend)`` opens (typed
        with ``type`` as :func:`broker.typed.messages` / :func:`broker.typed.records` do), tracked."""

        def opener() -> Any:
            source = open_source(self._async_backend())
            if type is None:
                return source
            from broker import typed

            if kind is SyncMessages:
                if hasattr(source, "next_batch"):
                    return typed.batched_messages(source, type)
                return typed.messages(source, type)
            return typed.records(source, type)

        self._async_backend()
        return self._track(  # type: ignore[no-any-return]
            kind(self, opener, read_ahead=read_ahead, timeout=self.timeout, close_timeout=self.close_timeout)
        )

    def close(self, timeout: float | None = None) -> None:
        """Close every publisher and consumer handed out, then the connection (``close_timeout`` at most).

        Idempotent; every later call raises :class:`~broker.errors.ClosedError`.
        """
        if self._closed:
            return
        check_not_in_loop("close()")
        limit = self.close_timeout if timeout is None else timeout
        errors: list[BaseException] = []
        if self._gen == generation():
            for resource in reversed(self._resources):
                try:
                    resource.close(limit)
                except Exception as exc:
                    errors.append(exc)
        self._closed = True
        if self._gen == generation() and self._async is not None:
            try:
                self._call(self._async.close, timeout=limit, what="closing the backend")
            except Exception as exc:
                errors.append(exc)
        self._resources = []
        if errors:
            raise errors[0]


#: Backends whose batched message consumer hands out a batch as soon as any message came (one pull
#: request each): a blocking ``messages()`` consumer reads through it, a batch per await.
BATCHED_MESSAGES = frozenset({"nats"})  # NATS JetStream

_BATCH_OPTIONS = frozenset({"batch_size", "batch_timeout"})

#: The most messages such a consumer pulls at once (at most half its ``read_ahead``, so a whole
#: batch fits once the caller has drained the read-ahead to half).
MESSAGE_BATCH = 100

#: Backends whose SDK is gRPC: it cannot run in a forked child of a process that used it unless
#: its fork support is on (``GRPC_ENABLE_FORK_SUPPORT=1`` in the environment before it is imported).
GRPC_BACKENDS = frozenset({"pubsub"})


def _check_fork_support(inherited: Backend | None) -> None:
    """Raise :class:`~broker.errors.ConfigError` in a forked child whose backend's SDK cannot work there."""
    if inherited is None or inherited.name not in GRPC_BACKENDS:
        return
    if os.environ.get("GRPC_ENABLE_FORK_SUPPORT", "").lower() in ("1", "true"):
        return
    raise ConfigError(
        f"the {inherited.name} backend's SDK (gRPC) cannot be used in a process forked after it "
        "was loaded: set GRPC_ENABLE_FORK_SUPPORT=1 in the environment before the parent starts, "
        "or connect only in the child (gunicorn: no --preload; multiprocessing: the 'spawn' start method)"
    )


async def _open(target: str | Mapping[str, Any]) -> Backend:
    from broker.connect import connect as connect_async

    return connect_async(target)
