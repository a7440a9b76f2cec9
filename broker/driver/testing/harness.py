"""The backend-specific side of the conformance suite, and helpers for writing tests."""

from __future__ import annotations

import itertools
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import AbstractContextManager, contextmanager
from typing import Any, Protocol

from broker.backend import Backend
from broker.capabilities import Capabilities
from broker.driver.clock import clock
from broker.interfaces import MessageIterator, RecordIterator
from broker.testing.waiting import collect, collect_records, drain, wait_until

__all__ = [
    "Harness",
    "KillableServer",
    "clock_ahead",
    "collect",
    "collect_records",
    "drain",
    "killable",
    "need",
    "subscribed_topic",
    "wait_until",
]


class KillableServer(Protocol):
    """A server started for one test only, which the test may kill (``Harness.own_server``)."""

    @property
    def url(self) -> str | Mapping[str, Any]:
        """What ``broker.connect`` takes to reach this server (with the harness's test settings)."""
        ...

    def kill(self) -> None:
        """SIGKILL the server's whole process tree: no goodbye to any client."""
        ...


class _Killable:
    """A started server (anything with ``kill()``) reached at a URL of the test's choosing."""

    def __init__(self, server: Any, url: str | Mapping[str, Any]) -> None:
        self.server = server
        self.url = url

    def __repr__(self) -> str:
        return f"<killable {self.server!r}>"

    def kill(self) -> None:
        self.server.kill()


def killable(server: Any, url: str | Mapping[str, Any]) -> KillableServer:
    """``server`` (a dev server with ``kill()``) as a :class:`KillableServer` reached at ``url``."""
    return _Killable(server, url)


class Harness:
    """What the conformance suite needs from a backend: the connected backend, its URL, timings.

    The suite uses only the public API with the portable option names (:mod:`broker.driver.options`),
    so a backend that needs option translation or topics made ready beforehand fails it, as an
    application would. The lifecycle tests (:mod:`broker.driver.testing.lifecycle`) never call the
    overridable hooks below; they exist for the older tests and are being retired.
    """

    #: Ack deadline (seconds) used by the redelivery tests; the shortest the server honours.
    short_ack_deadline: float = 1.0
    #: How late after its ack deadline the broker redelivers an unsettled message at the latest
    #: (seconds): the timer granularity of the broker or client plus scheduling slack. A check that
    #: a message is *not* redelivered waits this much past the deadline (:meth:`past_redelivery`).
    #: None: 1.5 ack deadlines, for a backend whose latency was not measured.
    redelivery_slack: float | None = None
    #: How long to wait for something that should happen (seconds).
    patience: float = 10.0
    #: URLs that must be rejected with a ConfigError by ``broker.connect``.
    bad_urls: Sequence[str] = ()
    #: The URL (or mapping) the backend was connected with: tests that open a second connection or
    #: run a consumer in another process connect with it. None skips those tests.
    url: str | Mapping[str, Any] | None = None
    #: Starts a server of this backend for the running test alone (a context manager that stops
    #: it on exit), so a test can kill it. None skips the tests that need one (a backend whose
    #: test server cannot be killed, or that has no server).
    own_server: Callable[[], AbstractContextManager[KillableServer]] | None = None
    #: Once its server died, the longest one operation may take before it returns or raises (seconds):
    #: the backend's documented timeouts as ``own_server``'s URL sets them, plus scheduling slack.
    dead_server_bound: float = 20.0

    def __init__(self, backend: Backend, **overrides: Any) -> None:
        self.backend = backend
        self._counter = itertools.count()
        self._run = uuid.uuid4().hex[:8]
        for name, value in overrides.items():
            if not hasattr(self, name):
                raise AttributeError(f"Harness has no setting {name!r}")
            setattr(self, name, value)

    def past_redelivery(self) -> float:
        """Seconds after a delivery (or the last ``in_progress()``) by which a message whose ack was
        lost is back, with ``short_ack_deadline``: the deadline plus :attr:`redelivery_slack`.

        A negative check ("not redelivered") waits this long, so it fails when the message does
        come back, and not longer.
        """
        deadline = self.short_ack_deadline
        slack = deadline * 1.5 if self.redelivery_slack is None else self.redelivery_slack
        return deadline + slack

    @property
    def capabilities(self) -> Capabilities:
        """The backend's capabilities."""
        return self.backend.capabilities

    def connect(self) -> Backend:
        """A second, independent connection to the same broker (skips the test without a ``url``)."""
        if self.url is None:
            import pytest

            pytest.skip("the harness names no url for a second connection")
        from broker.connect import connect

        return connect(self.url)

    def name(self, prefix: str = "t") -> str:
        """A topic or subscription name not used before in this run."""
        return f"{prefix}-{self._run}-{next(self._counter)}"

    async def prepare(self, topic: str, subscriptions: Sequence[str] = ()) -> None:
        """Make ``topic`` and ``subscriptions`` exist before anything is published (default: nothing)."""

    def messages(
        self, topic: str, subscription: str, *, ack_deadline: float | None = None
    ) -> MessageIterator:
        """A message iterator; ``ack_deadline`` in seconds when given."""
        options: dict[str, Any] = {}
        if ack_deadline is not None:
            options["ack_deadline"] = ack_deadline
        return self.backend.messages(topic, subscription, **options)

    def dead_letter_options(
        self, max_attempts: int, topic: str, *, source_topic: str, source_subscription: str
    ) -> dict[str, Any] | None:
        """Consumer options that dead-letter to ``topic`` after ``max_attempts`` deliveries.

        ``source_topic``/``source_subscription`` name what the consumer will read, for brokers where
        these are properties of the entity. The default is the portable options.
        """
        return {"max_attempts": max_attempts, "dead_letter_topic": topic}

    def records(self, topic: str, group: str) -> RecordIterator:
        """A record iterator in consumer ``group`` starting from the earliest offset."""
        return self.backend.records(topic, group)


def need(harness: Harness, *flags: str) -> None:
    """Skip the running test unless the backend claims every capability in ``flags``."""
    caps = harness.capabilities
    missing = [f for f in flags if not getattr(caps, f)]
    if missing:
        import pytest

        pytest.skip(f"backend {harness.backend.name!r} does not claim: {', '.join(missing)}")


async def subscribed_topic(harness: Harness, prefix: str) -> tuple[str, str]:
    """A new topic and a subscription of it that exists already (what is published from now on
    reaches it, also on brokers where a subscription starts empty)."""
    topic, sub = harness.name(prefix), harness.name("sub")
    await harness.prepare(topic, [sub])
    async with harness.backend.messages(topic, sub):
        pass  # the subscription exists from here on
    return topic, sub


@contextmanager
def clock_ahead(seconds: float) -> Iterator[None]:
    """Make the client's clock (:data:`broker.driver.clock.clock`) read ``seconds`` ahead while the
    block runs.

    The client then sees ack deadlines pass that the broker, on its own clock, does not: what a
    slow handler sees, without waiting for it. Blocks nest (their offsets add up). Only the
    portable layer and ``inmem://`` read this clock; SDK threads, loop timers and servers do not.
    """
    if clock.virtual:
        raise RuntimeError("clock_ahead() cannot move a clock that follows a virtual event loop")
    monotonic, wall = clock.monotonic, clock.time

    def ahead_monotonic() -> float:
        return monotonic() + seconds

    def ahead_wall() -> float:
        return wall() + seconds

    clock.monotonic, clock.time = ahead_monotonic, ahead_wall
    try:
        yield
    finally:
        clock.monotonic, clock.time = monotonic, wall
