"""Portable liveness and readiness, kept per consumer by :mod:`broker.telemetry`.

An instrumented backend (:func:`broker.telemetry.instrument`) keeps a :class:`ConsumerHealth`
for every consumer it hands out: whether its last call to the broker worked (``connected``),
whether it is being consumed (``consuming``), since when no message came (``idle_since``), its
last error, and its backlog as the broker reports it (``backlog``; ``lagging`` when it is above
the instrumented backend's ``lag_threshold``). It also keeps the outcome of the backend's last
ping (:meth:`broker.Backend.ping`: ``reachable``). :meth:`HealthState.report` sums them up into a
:class:`HealthReport` an application can serve from its own liveness and readiness endpoints
(``await backend.check_health()`` pings, then reports). Nothing here talks to a broker.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, replace
from typing import Any

from broker.driver.clock import clock, wall

__all__ = ["ConsumerHealth", "HealthReport", "HealthState"]


@dataclass(slots=True)
class ConsumerHealth:
    """What is known about one consumer (an iterator or a receiver).

    ``connected`` is None until the first call to the broker ends, then True when it worked
    (a timeout without messages counts as working) and False when it raised a broker error.
    ``consuming`` is True while a receiver runs, or from an iterator's first pull until it is
    closed. ``idle_since`` is when the last message arrived (or the consumer was opened):
    the consumer has seen nothing since. Times are POSIX seconds.
    """

    system: str
    destination: str
    subscription: str
    kind: str
    connected: bool | None = None
    consuming: bool = False
    closed: bool = False
    idle_since: float = field(default_factory=wall)
    received: int = 0
    last_error: str | None = None
    last_error_at: float | None = None
    backlog: int | None = None
    backlog_at: float | None = None
    lagging: bool = False
    backlog_errors: int = 0
    backlog_error: str | None = None

    def message(self, count: int = 1) -> None:
        """``count`` messages arrived."""
        self.connected = True
        self.received += count
        self.idle_since = clock.time()

    def success(self) -> None:
        """A call to the broker worked, with or without messages."""
        self.connected = True

    def failure(self, exc: BaseException) -> None:
        """A call to the broker raised ``exc``."""
        self.connected = False
        self.last_error = f"{type(exc).__name__}: {exc}"
        self.last_error_at = clock.time()

    def observe_backlog(self, backlog: int | None, threshold: int | None) -> None:
        """The broker reported ``backlog`` (None: it does not say); lagging above ``threshold``."""
        self.backlog = backlog
        self.backlog_at = clock.time()
        self.lagging = threshold is not None and backlog is not None and backlog > threshold

    def backlog_failure(self, exc: BaseException) -> None:
        """Asking the broker for the backlog raised ``exc`` (the last figure is kept)."""
        self.backlog_errors += 1
        self.backlog_error = f"{type(exc).__name__}: {exc}"

    @property
    def healthy(self) -> bool:
        """False when the consumer's last call to the broker failed."""
        return self.connected is not False

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping of the fields."""
        return {**asdict(self), "healthy": self.healthy}


@dataclass(frozen=True, slots=True)
class HealthReport:
    """A snapshot of an instrumented backend's health.

    ``live``: the backend is open (restart the process when False). ``ready``: live, the last
    ping (if any) was answered, and no open consumer's last call to the broker failed (stop
    sending work when False). ``lagging``: some open consumer's backlog is above the lag threshold
    (scale out, or look; it does not change ``ready``). ``reachable``: the outcome of the last
    ping (None: never pinged), with its error in ``ping_error``.
    """

    live: bool
    ready: bool
    consumers: tuple[ConsumerHealth, ...]
    lagging: bool = False
    reachable: bool | None = None
    ping_error: str | None = None

    def as_dict(self) -> dict[str, Any]:
        """A JSON-ready mapping (for a health endpoint)."""
        return {
            "live": self.live,
            "ready": self.ready,
            "lagging": self.lagging,
            "reachable": self.reachable,
            "ping_error": self.ping_error,
            "consumers": [c.as_dict() for c in self.consumers],
        }


class HealthState:
    """The health of one instrumented backend's consumers."""

    def __init__(self) -> None:
        self.consumers: list[ConsumerHealth] = []
        self.closed = False
        #: The outcome of the last ping (None: never pinged) and its error.
        self.reachable: bool | None = None
        self.ping_error: str | None = None
        #: When the last ping ended (POSIX seconds; None: never).
        self.pinged_at: float | None = None

    def pinged(self, exc: BaseException | None = None) -> None:
        """A ping ended: answered (``exc`` None) or failed with ``exc``."""
        self.reachable = exc is None
        self.ping_error = None if exc is None else f"{type(exc).__name__}: {exc}"
        self.pinged_at = clock.time()

    def consumer(self, system: str, destination: str, subscription: str, kind: str) -> ConsumerHealth:
        """A new entry for a consumer being handed out."""
        entry = ConsumerHealth(system, destination, subscription, kind)
        self.consumers.append(entry)
        return entry

    def report(self) -> HealthReport:
        """The health now; closed consumers are left out."""
        self.consumers = [c for c in self.consumers if not c.closed]
        live = not self.closed
        ready = live and self.reachable is not False and all(c.healthy for c in self.consumers)
        lagging = any(c.lagging for c in self.consumers)
        consumers = tuple(replace(c) for c in self.consumers)
        return HealthReport(live, ready, consumers, lagging, self.reachable, self.ping_error)
