"""The in-memory broker's storage: named brokers, topics as partitioned logs, wake-ups.

Every topic is a partitioned log. Queue subscriptions (``queue.py``) and consumer groups
(``log.py``) are cursors over it with their own delivery state. One broker is shared by name
within the process. Use it from one thread (any number of event loops, one after another, or
one at a time); waiters from another loop are woken thread-safely.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING

from broker import OutboundMessage
from broker.driver.acking import EMPTY_ATTRIBUTES
from broker.driver.clock import clock
from broker.driver.partitioning import Partitioner, partitioner_by_name
from broker.driver.provision import Provision
from broker.errors import ConfigError, ProvisioningError, UnknownTopic
from broker.log import TopicPartition

if TYPE_CHECKING:
    from broker.backends.inmem.faults import Faults
    from broker.backends.inmem.log import Group
    from broker.backends.inmem.queue import Subscription

__all__ = ["InmemBroker", "Partition", "TopicState", "forget", "get_broker", "topic_resource"]


def wake(waiters: set[asyncio.Future[None]]) -> None:
    """Resolve and forget every waiter (thread-safely for waiters of another loop)."""
    if not waiters:
        return
    try:
        running: asyncio.AbstractEventLoop | None = asyncio.get_running_loop()
    except RuntimeError:
        running = None
    for fut in waiters:
        if fut.done():
            continue
        loop = fut.get_loop()
        if loop is running:
            fut.set_result(None)
        elif not loop.is_closed():
            loop.call_soon_threadsafe(_resolve, fut)
    waiters.clear()


def _resolve(fut: asyncio.Future[None]) -> None:
    if not fut.done():
        fut.set_result(None)


async def wait_for_change(waiter_sets: Sequence[set[asyncio.Future[None]]], timeout: float | None) -> None:
    """Wait until one of ``waiter_sets`` is woken, or ``timeout`` seconds (None: forever)."""
    loop = asyncio.get_running_loop()
    fut: asyncio.Future[None] = loop.create_future()
    for waiters in waiter_sets:
        waiters.add(fut)
    handle = loop.call_later(timeout, _resolve, fut) if timeout is not None else None
    try:
        await fut
    finally:
        if handle is not None:
            handle.cancel()
        for waiters in waiter_sets:
            waiters.discard(fut)


class Partition:
    """One partition: parallel lists of values, keys, attributes and publish times.

    Parallel lists of immutable values (instead of one tuple per record) keep publishing free of
    per-record container objects, which the garbage collector would otherwise have to scan.
    """

    __slots__ = ("attributes", "base", "keys", "times", "values")

    def __init__(self) -> None:
        self.base = 0
        self.values: list[bytes | None] = []
        self.keys: list[str | None] = []
        self.attributes: list[Mapping[str, str]] = []
        self.times: list[float] = []

    @property
    def high(self) -> int:
        """The offset the next entry will get."""
        return self.base + len(self.values)

    def append(self, value: bytes | None, key: str | None, attributes: Mapping[str, str], now: float) -> int:
        """Append one entry; returns its offset."""
        offset = self.base + len(self.values)
        self.values.append(value)
        self.keys.append(key)
        self.attributes.append(attributes)
        self.times.append(now)
        return offset

    def extend(self, messages: Sequence[OutboundMessage], now: float) -> int:
        """Append many messages; returns the offset of the first."""
        offset = self.base + len(self.values)
        self.values.extend([m.data for m in messages])
        self.keys.extend([m.key for m in messages])
        self.attributes.extend([dict(m.attributes) if m.attributes else EMPTY_ATTRIBUTES for m in messages])
        self.times.extend(itertools.repeat(now, len(messages)))
        return offset


class TopicState:
    """A topic: partitions, config, and the subscriptions reading it."""

    def __init__(self, name: str, partitions: int, config: Mapping[str, str] | None) -> None:
        self.name = name
        self.partitions = [Partition() for _ in range(partitions)]
        self.config = dict(config or {})
        self.subscriptions: dict[str, Subscription] = {}
        self.waiters: set[asyncio.Future[None]] = set()
        self._spread = itertools.count()

    def tp(self, partition: int) -> TopicPartition:
        """The TopicPartition of ``partition``, checked."""
        if not 0 <= partition < len(self.partitions):
            raise UnknownTopic(f"topic {self.name!r} has no partition {partition}")
        return TopicPartition(self.name, partition)


class InmemBroker:
    """A process-local broker: topics (partitioned logs), subscriptions and consumer groups."""

    #: The faults publishes and receives must consult, while any is set (``faults.py``), else None.
    faults: Faults | None = None
    #: This broker's fault-injection API, once asked for (``faults.faults_of``).
    faults_api: Faults | None = None

    def __init__(self, name: str) -> None:
        self.name = name
        self.topics: dict[str, TopicState] = {}
        self.groups: dict[str, Group] = {}

    def __repr__(self) -> str:
        return f"<InmemBroker {self.name!r}: {len(self.topics)} topics>"

    def create_topic(
        self, name: str, partitions: int = 1, config: Mapping[str, str] | None = None
    ) -> TopicState:
        """Create ``name`` (no-op if it exists with the same partition count)."""
        if not name or not isinstance(name, str):
            raise ConfigError(f"a topic name must be a non-empty string, got {name!r}")
        if partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {partitions}")
        topic = self.topics.get(name)
        if topic is not None:
            if len(topic.partitions) != partitions:
                raise ConfigError(
                    f"topic {name!r} exists with {len(topic.partitions)} partitions, not {partitions}"
                )
            return topic
        topic = self.topics[name] = TopicState(name, partitions, config)
        for group in list(self.groups.values()):
            group.topic_created(name)
        return topic

    def topic(self, name: str, partitions: int | None = None) -> TopicState:
        """The topic ``name``, created with ``partitions`` if given and missing (else UnknownTopic)."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        if partitions is None:
            raise UnknownTopic(f"topic {name!r} does not exist on in-memory broker {self.name!r}")
        return self.create_topic(name, partitions)

    def provided_topic(self, name: str, partitions: int, provision: Provision) -> TopicState:
        """The topic ``name`` as the ``provision`` mode has it: created with ``partitions`` when
        missing under ``create``; a missing one is ``ProvisioningError`` under ``verify`` and this
        broker's own ``UnknownTopic`` under ``none``."""
        topic = self.topics.get(name)
        if topic is not None:
            return topic
        if provision == "create":
            return self.create_topic(name, partitions)
        if provision == "verify":
            raise ProvisioningError("inmem", [topic_resource(name)])
        return self.topic(name)  # UnknownTopic

    def append(
        self,
        topic: TopicState,
        messages: Sequence[OutboundMessage],
        partitioner: Partitioner,
        partition: int | None = None,
    ) -> None:
        """Append ``messages`` (already validated), keyed ones to their key's partition."""
        now = clock.time()
        parts = topic.partitions
        count = len(parts)
        if count == 1 or partition is not None:
            p = 0 if partition is None else partition
            if not 0 <= p < count:
                raise UnknownTopic(f"topic {topic.name!r} has no partition {p}")
            parts[p].extend(messages, now)
        else:
            spread = topic._spread
            for m in messages:
                key = m.key
                p = partitioner(key.encode(), count) if key is not None else next(spread) % count
                parts[p].append(m.data, key, dict(m.attributes) if m.attributes else EMPTY_ATTRIBUTES, now)
        if topic.waiters:
            wake(topic.waiters)

    def append_one(self, topic: TopicState, message: OutboundMessage, partitioner: Partitioner) -> None:
        """Append one message (already validated)."""
        parts = topic.partitions
        key = message.key
        if len(parts) == 1:
            part = parts[0]
        else:
            part = parts[
                partitioner(key.encode(), len(parts)) if key is not None else next(topic._spread) % len(parts)
            ]
        part.append(
            message.data,
            key,
            dict(message.attributes) if message.attributes else EMPTY_ATTRIBUTES,
            clock.time(),
        )
        if topic.waiters:
            wake(topic.waiters)

    def append_record(
        self,
        topic: TopicState,
        value: bytes | None,
        key: str | None,
        attributes: Mapping[str, str] | None,
        partition: int | None,
        partitioner: Partitioner,
    ) -> tuple[int, int]:
        """Append one log record (value may be None: a tombstone); returns (partition, offset)."""
        count = len(topic.partitions)
        if partition is None:
            partition = partitioner(key.encode(), count) if key is not None else next(topic._spread) % count
        part = topic.partitions[topic.tp(partition).partition]
        offset = part.append(value, key, dict(attributes) if attributes else EMPTY_ATTRIBUTES, clock.time())
        if topic.waiters:
            wake(topic.waiters)
        return partition, offset


def topic_resource(name: str) -> str:
    """How a ``ProvisioningError`` names topic ``name``."""
    return f"topic {name!r}"


_brokers: dict[str, InmemBroker] = {}


def get_broker(name: str = "default") -> InmemBroker:
    """The process-wide broker called ``name`` (created on first use)."""
    broker = _brokers.get(name)
    if broker is None:
        broker = _brokers[name] = InmemBroker(name)
    return broker


def forget(name: str) -> None:
    """Drop the broker called ``name`` and everything it holds (tests use fresh names instead)."""
    _brokers.pop(name, None)


def resolve_partitioner(name: str) -> Partitioner:
    """The partitioner called ``name``."""
    return partitioner_by_name(name)
