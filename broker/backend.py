"""The ``Backend`` contract: what :func:`broker.connect` returns, and the optional protocols some
backends add (:class:`Backlog`, :class:`QueueTracking`).

A backend's implementation builds on :class:`broker.driver.BackendBase`; every member of
``BackendBase`` is on :class:`Backend` with the same signature (``tests/unit/test_backend_protocol.py``
compares them). What depends on a capability (``transactional_publisher()``, ``log()``,
``queue_tracker()``, ``faults``) raises :class:`~broker.errors.NotSupported` where a backend lacks it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, Protocol, Self, runtime_checkable

from broker.adapt.receivers import DEFAULT_DRAIN_TIMEOUT, NackDelay
from broker.backoff import DEFAULT_BACKOFF
from broker.capabilities import Capabilities
from broker.errors import BrokerError, ConnectionFailed, PublishError
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
from broker.retry import RetryPolicy

if TYPE_CHECKING:
    from broker.log import Log

__all__ = [
    "Backend",
    "Backlog",
    "FaultInjection",
    "Provision",
    "QueueTracking",
]

#: Seconds :meth:`Backend.ping` waits for the broker's answer unless told otherwise.
DEFAULT_PING_TIMEOUT = 10.0

#: An error to inject: a :class:`~broker.errors.BrokerError` class (raised with a message naming
#: the fault) or an instance (raised as is).
ErrorSpec = type[BrokerError] | BrokerError


class FaultInjection(Protocol):
    """Fault injection on a backend (``backend.faults``; the in-memory backend has it).

    ``docs/testing.md`` shows it at work: failing publishes, a dropped connection, a slow consumer.
    """

    #: How many publishes and receives failed because of a fault (for assertions).
    injected: int

    def fail_publishes(
        self, count: int = 1, error: ErrorSpec = PublishError, *, topic: str | None = None
    ) -> None:
        """Make the next ``count`` publish calls (to ``topic``, or any) raise ``error``."""

    def drop_connection(self, error: ErrorSpec = ConnectionFailed) -> None:
        """Publishes and receives raise ``error`` until :meth:`reconnect`."""

    def reconnect(self) -> None:
        """End a :meth:`drop_connection`."""

    def slow_consumer(self, subscription: str | None = None, delay: float = 1.0) -> None:
        """Hand each delivery to ``subscription`` (or to every consumer) out ``delay`` seconds late."""

    def clear(self) -> None:
        """Remove every fault."""

    @property
    def active(self) -> bool:
        """True while any fault is set."""


#: The values of every backend's ``provision`` setting: create missing resources (the default),
#: verify they exist (``ProvisioningError`` naming what is missing), or neither.
Provision = Literal["create", "verify", "none"]


@runtime_checkable
class Backend(Protocol):
    """A connection to one broker, handing out publishers and consumers."""

    @property
    def name(self) -> str:
        """The URL scheme this backend was chosen by (``inmem``, ``kafka``, ...)."""

    @property
    def capabilities(self) -> Capabilities:
        """What this backend supports."""

    #: See :class:`Backlog`: whether :meth:`backlog` counts messages delivered and not yet acked.
    backlog_counts_in_flight: bool

    @property
    def provision_modes(self) -> tuple[Provision, ...]:
        """The ``provision`` modes this backend implements (``create``, ``verify``, ``none``)."""
    #: The ``provision`` mode in force (from the settings).
    provision: Provision

    async def missing_resources(self) -> Sequence[str]:
        """The resources the settings name that do not exist (``ping()`` checks them under ``verify``)."""
        ...

    @property
    def resources(self) -> tuple[Any, ...]:
        """The publishers and consumers handed out and not closed yet: what :meth:`close` closes."""

    @property
    def faults(self) -> FaultInjection:
        """Fault injection for tests (in-memory backend); ``NotSupported`` on the others."""

    def on_publisher(self, hook: Callable[[Publisher], None]) -> None:
        """Call ``hook`` with every publisher this backend handed out and will hand out."""

    def publisher(self) -> MiddlewarePublisher:
        """A publisher (topics are cheap handles on it)."""

    def transactional_publisher(self, **options: Any) -> TransactionalPublisher:
        """A publisher with transactions (``capabilities.transactions``; else ``NotSupported``)."""

    def messages(self, topic: str, subscription: str, **options: Any) -> MessageIterator:
        """Per-message consumption of ``topic`` through ``subscription`` (competing consumers share it)."""

    def batched_messages(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> BatchedMessageIterator:
        """Like :meth:`messages`, in batches of up to ``batch_size`` (0: the backend's default)."""

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
        """Callback-style consumption with ``concurrency`` handlers at a time.

        A failed handler's message is nacked after ``nack_delay``, or ``retry`` (a
        :class:`broker.RetryPolicy`) decides; the receiver's ``stop()`` lets running handlers
        finish for up to ``drain_timeout`` seconds.
        """

    def records(
        self, topics: str | Sequence[str], group: str | None = None, **options: Any
    ) -> RecordIterator:
        """Partitioned-log consumption of ``topics`` in consumer group ``group``."""

    def batched_records(
        self,
        topics: str | Sequence[str],
        group: str | None = None,
        *,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> BatchedIterator:
        """Like :meth:`records`, in batches of up to ``batch_size`` (0: the backend's default)."""

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """Messages of ``subscription`` not consumed yet; None where the broker does not tell.

        See :class:`Backlog` for what each backend counts.
        """

    def log(self) -> Log:
        """The :mod:`broker.log` port on this broker (Kafka, in-memory; else ``NotSupported``)."""

    def queue_tracker(self, topic: str, **options: Any) -> Any:
        """The redelivery tracker of the marker queue on ``topic`` (Kafka; else ``NotSupported``)."""

    async def ping(self, timeout: float = DEFAULT_PING_TIMEOUT) -> None:
        """Dial the broker, authenticate and get an answer within ``timeout`` seconds.

        Returns when the broker answered (nothing is created or published). Raises
        :class:`~broker.errors.AuthenticationFailed` when the broker refuses the credentials and
        :class:`~broker.errors.ConnectionFailed` when it cannot be reached or does not answer in
        time, so a wrong host or password shows at start (or in a readiness check), not at the
        first publish.
        """

    async def close(self) -> None:
        """Close every publisher and consumer handed out, then the connection."""

    async def __aenter__(self) -> Self: ...

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


@runtime_checkable
class QueueTracking(Protocol):
    """The optional marker-queue extra of a backend whose ``messages()`` run on a marker queue (Kafka).

    ``queue_tracker(topic, **options)`` returns the queue's redelivery tracker for ``topic``
    (``broker queue-tracker`` runs it as a process of its own). Every :class:`Backend` has the
    method (``NotSupported`` without a marker queue), so this protocol types a backend outside
    ``BackendBase`` that has nothing else of :class:`Backend`.
    """

    def queue_tracker(self, topic: str, **options: Any) -> Any:
        """The redelivery tracker of the marker queue on ``topic`` (options as for ``messages()``)."""


@runtime_checkable
class Backlog(Protocol):
    """The optional backlog extra: how far a subscription is behind, as the broker reports it.

    Every :class:`BackendBase` has :meth:`backlog`; it returns None unless the backend reports a
    figure (a backend outside ``BackendBase`` may leave the method out: treat that as None).
    ``broker.telemetry`` turns it into the ``polybroker.consumer.backlog`` gauge and the
    ``lagging`` state of a consumer's health.

    What is counted, per backend (``docs/metrics.md`` has the table):

    * inmem: messages of the subscription not yet acked (undelivered, waiting for redelivery and
      in flight); for a ``records()`` group, records after the committed offsets;
    * kafka: the sum over the topic's partitions of the high watermark minus the group's committed
      offset (``records()``: the group; ``messages()``: the marker queue's group, by default
      ``kafka-mq-<subscription>``). The marker queue commits when a batch is fetched, so messages
      in flight (fetched, not acked) are not counted: ``backlog_counts_in_flight`` is False;
    * nats (JetStream): the durable consumer's ``num_pending + num_ack_pending``;
    * rabbitmq: the queue's ready messages (``message_count`` of a passive declare); AMQP does not
      report unacked ones, so ``backlog_counts_in_flight`` is False;
    * servicebus: the entity's ``active_message_count`` from the management API (None where the
      management API does not report it);
    * pubsub, pulsar: None (neither client has a backlog call).
    """

    #: True when messages delivered and not yet acked are part of the backlog; False where the
    #: broker only reports messages not yet delivered (fetched) to any consumer.
    backlog_counts_in_flight: bool

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """Messages of ``subscription`` on ``topic`` not consumed yet, as the broker reports it.

        ``subscription`` is the subscription of ``messages()`` / ``receiver()``, or the consumer
        group of ``records()``. Returns None where the broker does not say. Raises
        :class:`~broker.errors.UnknownTopic` where the broker says the topic or subscription does
        not exist, and the backend's other :class:`~broker.errors.BrokerError` when asking fails.
        """
