"""Fault injection on ``inmem://``: failing publishes, a dropped connection, a slow consumer.

An application's retry and shutdown logic is tested deterministically against the in-memory
broker by making it misbehave on purpose::

    faults = backend.faults                     # InmemBackend.faults; the fixture polybroker_faults
    faults.fail_publishes(2, Throttled)         # the next 2 publishes raise Throttled
    faults.drop_connection()                    # publishes and every receive raise ConnectionFailed ...
    faults.reconnect()                          # ... until this
    faults.slow_consumer("workers", delay=5.0)  # each delivery to "workers" takes 5 s more

Faults belong to one named broker (every backend connected to it sees them) and cost nothing
while none is set. Delays are ``asyncio.sleep``, so in virtual time they take no wall time.
:meth:`Faults.clear` (or forgetting the broker) removes every fault. In-memory only: a
real broker is made to fail by the fault suite's own tools, not by this API.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from broker.backends.inmem.store import InmemBroker, wake
from broker.errors import BrokerError, ConfigError, ConnectionFailed, PublishError

__all__ = ["Faults", "faults_of"]

ErrorSpec = type[BrokerError] | BrokerError


@dataclass(slots=True)
class _PublishFailure:
    remaining: int
    error: ErrorSpec
    topic: str | None


def _raise(error: ErrorSpec, what: str) -> None:
    if isinstance(error, BrokerError):
        raise error
    raise error(f"{what} (injected by inmem faults)")


class Faults:
    """The faults set on one in-memory broker (see the module)."""

    def __init__(self, broker: InmemBroker) -> None:
        self._broker = broker
        self._publish_failures: list[_PublishFailure] = []
        self._dropped: ErrorSpec | None = None
        self._delays: dict[str | None, float] = {}
        #: How many publishes and receives failed because of a fault (for assertions).
        self.injected = 0

    def __repr__(self) -> str:
        return (
            f"<Faults of {self._broker.name!r}: {sum(f.remaining for f in self._publish_failures)} "
            f"publish failures pending, {'dropped' if self._dropped else 'connected'}, "
            f"slow: {self._delays or 'none'}>"
        )

    # -- setting faults -------------------------------------------------------------------------

    def fail_publishes(
        self, count: int = 1, error: ErrorSpec = PublishError, *, topic: str | None = None
    ) -> None:
        """Make the next ``count`` publish calls (to ``topic``, or any) raise ``error``.

        ``error`` is a :class:`~broker.errors.BrokerError` subclass (raised with a message naming the
        fault) or an instance (raised as is). A ``batch_publish`` is one call; a failed call
        publishes none of its messages.
        """
        if not isinstance(count, int) or count < 1:
            raise ConfigError(f"count must be an int >= 1, got {count!r}")
        _check_error(error)
        self._publish_failures.append(_PublishFailure(count, error, topic))
        self._activate()

    def drop_connection(self, error: ErrorSpec = ConnectionFailed) -> None:
        """Drop the broker's connections: publishes and receives raise ``error`` until :meth:`reconnect`.

        Consumers waiting for a message are woken and raise at once. Messages delivered before the
        drop stay leased: their ack deadline passes as usual, so they are redelivered after it.
        """
        _check_error(error)
        self._dropped = error
        self._activate()
        for topic in self._broker.topics.values():
            wake(topic.waiters)

    def reconnect(self) -> None:
        """End :meth:`drop_connection`: publishes and receives work again."""
        self._dropped = None
        self._settle()

    def slow_consumer(self, subscription: str | None = None, delay: float = 1.0) -> None:
        """Make each delivery to consumers of ``subscription`` (None: every one) take ``delay`` seconds more.

        Record consumers are named by their group (``backend.records(topic, group=...)``); a reader
        without a group is slowed by ``subscription=None`` only.

        The messages are taken (their ack deadline runs) and handed out ``delay`` seconds later,
        as a consumer stuck in a slow network or a slow handler would see them. ``delay=0`` removes it.
        """
        if delay < 0:
            raise ConfigError(f"delay must be >= 0, got {delay!r}")
        if delay:
            self._delays[subscription] = float(delay)
        else:
            self._delays.pop(subscription, None)
        self._activate()
        self._settle()

    def clear(self) -> None:
        """Remove every fault."""
        self._publish_failures.clear()
        self._dropped = None
        self._delays.clear()
        self._settle()

    @property
    def active(self) -> bool:
        """True while any fault is set."""
        return bool(self._publish_failures or self._dropped is not None or self._delays)

    # -- what the backend calls -----------------------------------------------------------------

    def before_publish(self, topic: str) -> None:
        """Raise the injected error for a publish to ``topic``, if one is due."""
        if self._dropped is not None:
            self.injected += 1
            _raise(self._dropped, f"cannot publish to {topic!r}: the connection was dropped")
        for failure in self._publish_failures:
            if failure.topic is None or failure.topic == topic:
                failure.remaining -= 1
                if failure.remaining == 0:
                    self._publish_failures.remove(failure)
                    self._settle()
                self.injected += 1
                _raise(failure.error, f"publish to {topic!r} failed")

    def before_receive(self, topic: str, subscription: str) -> None:
        """Raise the drop error for a receive from ``topic``/``subscription`` while dropped."""
        if self._dropped is not None:
            self.injected += 1
            _raise(
                self._dropped, f"cannot receive from {topic!r}/{subscription!r}: the connection was dropped"
            )

    def receive_delay(self, subscription: str) -> float:
        """Seconds to hold a delivery to ``subscription`` (0: none)."""
        delays = self._delays
        if not delays:
            return 0.0
        return delays.get(subscription, delays.get(None, 0.0))

    def _activate(self) -> None:
        self._broker.faults = self

    def _settle(self) -> None:
        """Stop being consulted once no fault is left (the hot paths check one attribute)."""
        if not self.active and self._broker.faults is self:
            self._broker.faults = None


def _check_error(error: Any) -> None:
    if not (isinstance(error, BrokerError) or (isinstance(error, type) and issubclass(error, BrokerError))):
        raise ConfigError(f"error must be a broker.errors.BrokerError class or instance, got {error!r}")


def faults_of(target: Any) -> Faults:
    """The :class:`Faults` of an in-memory backend, broker, or broker name (made on first use)."""
    if isinstance(target, str):
        from broker.backends.inmem.store import get_broker

        broker = get_broker(target)
    elif isinstance(target, InmemBroker):
        broker = target
    else:
        found = getattr(target, "broker", None)
        if not isinstance(found, InmemBroker):
            raise ConfigError(f"fault injection is for inmem:// only, not {target!r}")
        broker = found
    existing = broker.faults_api
    if existing is None:
        existing = broker.faults_api = Faults(broker)
    return existing
