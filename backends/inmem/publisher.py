"""Publishing to the in-memory broker, with and without transactions."""

from __future__ import annotations

from collections.abc import Mapping

from backends.inmem.store import InmemBroker, TopicState
from broker.errors import ClosedError, PublishError, TransactionError
from broker.log import TopicPartition
from broker.message import OutboundMessage
from broker.outbound import check_batch, check_outbound, is_plain
from broker.partitioning import Partitioner
from broker.resources import AsyncResource

__all__ = ["InmemPublisher", "InmemTopic", "InmemTransactionalPublisher"]


class InmemTopic:
    """A Topic of the in-memory broker: publishing appends to the topic's log at once."""

    __slots__ = ("_publisher", "_state", "name")

    def __init__(self, publisher: InmemPublisher, name: str) -> None:
        self._publisher = publisher
        self.name = name
        self._state: TopicState | None = None

    def __repr__(self) -> str:
        return f"<InmemTopic {self.name!r}>"

    def state(self) -> TopicState:
        """The topic's storage (created with the publisher's partition count when missing)."""
        state = self._state
        if state is None:
            publisher = self._publisher
            state = self._state = publisher._broker.topic(self.name, publisher._partitions)
        return state

    async def publish(self, message: OutboundMessage, *, timeout: float | None = None) -> None:
        """Append one message."""
        if not is_plain(message):
            check_outbound(message)
        publisher = self._publisher
        if publisher._closed or type(publisher) is not InmemPublisher:
            publisher._write(self, (message,))  # raises when closed; transactions buffer
        else:
            publisher._broker.append_one(self._state or self.state(), message, publisher._partitioner)

    async def batch_publish(self, *messages: OutboundMessage, timeout: float | None = None) -> None:
        """Append all messages, in order, in one step."""
        check_batch(messages)
        if messages:
            self._publisher._write(self, messages)


class InmemPublisher(AsyncResource):
    """A Publisher on an in-memory broker."""

    def __init__(self, broker: InmemBroker, partitions: int, partitioner: Partitioner) -> None:
        self._broker = broker
        self._partitions = partitions
        self._partitioner = partitioner
        self._topics: dict[str, InmemTopic] = {}
        self._closed = False

    def topic(self, name: str) -> InmemTopic:
        """The handle for topic ``name`` (created on first publish)."""
        if self._closed:
            raise ClosedError("the publisher is closed")
        if not isinstance(name, str) or not name:
            raise ValueError(f"a topic name must be a non-empty string, got {name!r}")
        topic = self._topics.get(name)
        if topic is None:
            topic = self._topics[name] = InmemTopic(self, name)
        return topic

    def _write(self, topic: InmemTopic, messages: tuple[OutboundMessage, ...]) -> None:
        if self._closed:
            raise ClosedError(f"cannot publish to {topic.name!r}: the publisher is closed")
        if len(messages) == 1:
            self._broker.append_one(topic.state(), messages[0], self._partitioner)
        else:
            self._broker.append(topic.state(), messages, self._partitioner)

    async def close(self) -> None:
        """Close the publisher; later publishes raise ClosedError. Idempotent."""
        self._closed = True


class InmemTransactionalPublisher(InmemPublisher):
    """A TransactionalPublisher: messages and consumer offsets become visible together on commit."""

    def __init__(self, broker: InmemBroker, partitions: int, partitioner: Partitioner) -> None:
        super().__init__(broker, partitions, partitioner)
        self._pending: list[tuple[InmemTopic, tuple[OutboundMessage, ...]]] | None = None
        self._offsets: dict[str, dict[TopicPartition, int]] = {}

    @property
    def in_transaction(self) -> bool:
        """True between begin() and commit()/abort()."""
        return self._pending is not None

    async def begin(self) -> None:
        """Start a transaction."""
        if self._closed:
            raise ClosedError("the publisher is closed")
        if self._pending is not None:
            raise TransactionError("a transaction is already open; commit or abort it first")
        self._pending = []
        self._offsets = {}

    def _write(self, topic: InmemTopic, messages: tuple[OutboundMessage, ...]) -> None:
        if self._closed:
            raise ClosedError(f"cannot publish to {topic.name!r}: the publisher is closed")
        if self._pending is None:
            raise TransactionError("publish on a transactional publisher needs begin() first")
        self._pending.append((topic, messages))

    async def send_offsets(self, group: str, offsets: Mapping[TopicPartition, int]) -> None:
        """Commit ``offsets`` for ``group`` as part of the transaction (consume-transform-produce)."""
        if self._pending is None:
            raise TransactionError("send_offsets needs begin() first")
        self._offsets.setdefault(group, {}).update(offsets)

    async def commit(self) -> bool:
        """Make every message (and offset) of the transaction visible at once."""
        if self._pending is None:
            raise TransactionError("commit() without begin()")
        pending, self._pending = self._pending, None
        try:
            for topic, messages in pending:
                self._broker.append(topic.state(), messages, self._partitioner)
        except Exception as exc:
            raise PublishError(f"transaction failed while committing: {exc}") from exc
        for group, offsets in self._offsets.items():
            group_state = self._broker.groups.get(group)
            if group_state is not None:
                group_state.committed.update(offsets)
        self._offsets = {}
        return True

    async def abort(self) -> bool:
        """Drop every message of the transaction."""
        if self._pending is None:
            raise TransactionError("abort() without begin()")
        self._pending = None
        self._offsets = {}
        return True

    async def close(self) -> None:
        """Close; an open transaction is aborted."""
        self._pending = None
        await super().close()
