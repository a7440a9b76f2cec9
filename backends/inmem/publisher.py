"""Publishing to the in-memory broker, with and without transactions: its publish drivers.

The public ``Publisher``/``Topic`` are :mod:`broker.driver.publishing`'s; the drivers here append to the
topic's log at once, or buffer a transaction until ``commit()``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from broker import OutboundMessage
from broker.backends.inmem.store import InmemBroker, TopicState
from broker.driver.partitioning import Partitioner
from broker.driver.provision import Provision
from broker.driver.publishing import DriverPublisher
from broker.errors import ClosedError, PublishError, TransactionError
from broker.log import TopicPartition

__all__ = ["InmemPublishDriver", "InmemPublisher", "InmemTransactionalPublisher"]


class InmemPublishDriver:
    """Appends to the in-memory broker's topics (created with its partition count when missing,
    under ``provision="create"``; see :meth:`InmemBroker.provided_topic`)."""

    __slots__ = ("_broker", "_partitioner", "_partitions", "_provision", "_states")

    def __init__(
        self, broker: InmemBroker, partitions: int, partitioner: Partitioner, provision: Provision = "create"
    ) -> None:
        self._broker = broker
        self._partitions = partitions
        self._partitioner = partitioner
        self._provision = provision
        self._states: dict[str, TopicState] = {}

    def state(self, topic: str) -> TopicState:
        """The topic's storage (created when missing, as ``provision`` allows)."""
        state = self._states.get(topic)
        if state is None:
            state = self._broker.provided_topic(topic, self._partitions, self._provision)
            self._states[topic] = state
        return state

    def append(self, topic: str, messages: Sequence[OutboundMessage]) -> None:
        """Append ``messages`` to ``topic`` in one step."""
        if self._broker.faults is not None:
            self._broker.faults.before_publish(topic)
        state = self._states.get(topic) or self.state(topic)
        if len(messages) == 1:
            self._broker.append_one(state, messages[0], self._partitioner)
        else:
            self._broker.append(state, messages, self._partitioner)

    #: Append at once (``broker.driver.publishing.ImmediatePublishDriver``: no await per publish).
    send_now = append

    def check_topic(self, name: str) -> None:
        """Every non-empty name is a topic here."""

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Append at once."""
        self.send_now(topic, messages)

    async def close(self) -> None:
        """Nothing to release."""


class InmemTransactionDriver(InmemPublishDriver):
    """Buffers what a transaction publishes until commit."""

    __slots__ = ("offsets", "pending")

    def __init__(
        self, broker: InmemBroker, partitions: int, partitioner: Partitioner, provision: Provision = "create"
    ) -> None:
        super().__init__(broker, partitions, partitioner, provision)
        self.pending: list[tuple[str, Sequence[OutboundMessage]]] | None = None
        self.offsets: dict[str, dict[TopicPartition, int]] = {}

    def send_now(self, topic: str, messages: Sequence[OutboundMessage]) -> None:
        """Buffer until commit (a topic that may not be created must exist now, not at commit)."""
        if self.pending is None:
            raise TransactionError("publish on a transactional publisher needs begin() first")
        if self._provision != "create":
            self.state(topic)
        self.pending.append((topic, messages))

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Buffer until commit."""
        self.send_now(topic, messages)

    def commit(self) -> None:
        """Append every buffered message, then commit the offsets sent with the transaction."""
        pending, self.pending = self.pending or [], None
        try:
            for topic, messages in pending:
                self.append(topic, messages)
        except Exception as exc:
            raise PublishError(f"transaction failed while committing: {exc}") from exc
        for group, offsets in self.offsets.items():
            group_state = self._broker.groups.get(group)
            if group_state is not None:
                group_state.committed.update(offsets)
        self.offsets = {}

    async def close(self) -> None:
        """An open transaction is aborted."""
        self.pending = None
        self.offsets = {}


class InmemPublisher(DriverPublisher):
    """A Publisher on an in-memory broker, over the backend's shared driver."""

    def __init__(self, driver: InmemPublishDriver) -> None:
        super().__init__(driver, shared=True)


class InmemTransactionalPublisher(DriverPublisher):
    """A TransactionalPublisher: messages and consumer offsets become visible together on commit."""

    def __init__(
        self, broker: InmemBroker, partitions: int, partitioner: Partitioner, provision: Provision = "create"
    ) -> None:
        self._transaction = InmemTransactionDriver(broker, partitions, partitioner, provision)
        super().__init__(self._transaction)

    @property
    def in_transaction(self) -> bool:
        """True between begin() and commit()/abort()."""
        return self._transaction.pending is not None

    async def begin(self) -> None:
        """Start a transaction."""
        if self.closed:
            raise ClosedError("the publisher is closed")
        if self._transaction.pending is not None:
            raise TransactionError("a transaction is already open; commit or abort it first")
        self._transaction.pending = []
        self._transaction.offsets = {}

    async def send_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as part of the transaction (consume-transform-produce)."""
        if self._transaction.pending is None:
            raise TransactionError("send_offsets needs begin() first")
        self._transaction.offsets.setdefault(group, {}).update(offsets)

    async def commit(self) -> bool:
        """Make every message (and offset) of the transaction visible at once."""
        if self._transaction.pending is None:
            raise TransactionError("commit() without begin()")
        self._transaction.commit()
        return True

    async def abort(self) -> bool:
        """Drop every message of the transaction."""
        if self._transaction.pending is None:
            raise TransactionError("abort() without begin()")
        self._transaction.pending = None
        self._transaction.offsets = {}
        return True
