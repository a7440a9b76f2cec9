"""The in-memory backend: ``inmem://NAME``."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar

from broker import Capabilities, Provision
from broker.backends.inmem.backlog import backlog as _backlog
from broker.backends.inmem.faults import Faults, faults_of
from broker.backends.inmem.log import InmemBatchedRecordIterator, InmemLog, InmemRecordIterator
from broker.backends.inmem.publisher import InmemPublishDriver, InmemPublisher, InmemTransactionalPublisher
from broker.backends.inmem.queue import InmemBatchedMessageIterator, InmemMessageIterator, Subscription
from broker.backends.inmem.registration import InmemFactory
from broker.backends.inmem.settings import ConsumerOptions, InmemSettings
from broker.backends.inmem.store import InmemBroker, forget, get_broker, resolve_partitioner, topic_resource
from broker.driver.base import BackendBase, Batching
from broker.driver.options import build_consumer_options
from broker.errors import ConfigError, ProvisioningError, UnknownTopic

__all__ = ["InmemBackend"]

#: Every capability but ``persistent``: the claims and their mechanisms are ``InmemFactory.mechanisms``.
CAPABILITIES = Capabilities.claiming(InmemFactory.mechanisms)


class InmemBackend(BackendBase):
    """A connection to the process-local broker named by ``settings.name``."""

    name = "inmem"
    capabilities = CAPABILITIES
    #: ``create`` makes topics and subscriptions on first use; ``verify`` and ``none`` make none
    #: (a ``create`` connection to the same named broker, or ``log().create_topic``, does).
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: InmemSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or InmemSettings()
        self._check_provision()
        self.broker: InmemBroker = get_broker(self.settings.name)
        self._partitioner = resolve_partitioner(self.settings.partitioner)

    def __repr__(self) -> str:
        return f"<InmemBackend {self.settings.name!r}>"

    @property
    def faults(self) -> Faults:
        """Fault injection on this broker (``faults.py``): failing publishes, a drop, a slow consumer."""
        return faults_of(self.broker)

    def forget(self) -> None:
        """Drop the named broker and everything it holds (the test kit does it after each test)."""
        forget(self.settings.name)

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return build_consumer_options(
            ConsumerOptions, self.settings, options, native_names={}, backend="inmem"
        )

    def publisher(self) -> InmemPublisher:
        """A publisher; topics are created on first publish with ``settings.partitions`` (under
        ``provision="create"``; else publishing to a missing topic raises)."""
        driver = self._shared_driver(
            lambda: InmemPublishDriver(
                self.broker, self.settings.partitions, self._partitioner, self.provision
            )
        )
        return self._track(InmemPublisher(driver))  # type: ignore[no-any-return]

    def transactional_publisher(self, **options: Any) -> InmemTransactionalPublisher:
        """A publisher whose messages appear on commit and vanish on abort."""
        if options:
            raise ConfigError(f"unknown transactional publisher options: {', '.join(sorted(options))}")
        return self._track(  # type: ignore[no-any-return]
            InmemTransactionalPublisher(
                self.broker, self.settings.partitions, self._partitioner, self.provision
            )
        )

    async def missing_resources(self) -> Sequence[str]:
        """The topic ``dead_letter_topic`` names, when it does not exist (the only resource these
        settings name)."""
        target = self.settings.dead_letter_topic
        if target is not None and target not in self.broker.topics:
            return [topic_resource(target)]
        return []

    def _check_provided(self, topic: str, subscription: str, options: ConsumerOptions) -> None:
        """Under ``verify``: ``ProvisioningError`` naming every missing one of ``topic``,
        ``subscription`` and the consumer's dead-letter topic; under ``none``: the broker's
        ``UnknownTopic`` for a missing topic or subscription. Nothing under ``create``."""
        if self.provision == "create":
            return
        state = self.broker.topics.get(topic)
        missing = [] if state is not None else [topic_resource(topic)]
        if state is None or subscription not in state.subscriptions:
            missing.append(f"subscription {subscription!r} of {topic!r}")
        target = options.dead_letter_topic
        if target is not None and target not in self.broker.topics and target != topic:
            missing.append(topic_resource(target))
        if self.provision == "verify":
            if missing:
                raise ProvisioningError(self.name, missing)
            return
        if state is None:
            self.broker.topic(topic)  # the broker's UnknownTopic
            return
        if subscription not in state.subscriptions:
            raise UnknownTopic(
                f"subscription {subscription!r} of topic {topic!r} does not exist on in-memory broker "
                f"{self.broker.name!r}"
            )

    def _subscription(self, topic: str, subscription: str, options: ConsumerOptions) -> Subscription:
        if not subscription:
            raise ConfigError("a subscription name is needed")
        self._check_provided(topic, subscription, options)
        state = self.broker.topic(topic, self.settings.partitions)
        existing = state.subscriptions.get(subscription)
        if existing is not None:
            if (
                existing.ack_deadline != options.ack_deadline
                or existing.options.max_attempts != options.max_attempts
            ):
                raise ConfigError(
                    f"subscription {subscription!r} of {topic!r} exists with ack_deadline="
                    f"{existing.ack_deadline} and max_attempts={existing.options.max_attempts}"
                )
            return existing
        created = Subscription(self.broker, state, subscription, options, self._partitioner)
        state.subscriptions[subscription] = created
        return created

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> InmemMessageIterator | InmemBatchedMessageIterator:
        """Consume ``topic`` through ``subscription`` (created on first use).

        Options: ``ack_deadline``, ``max_attempts``, ``dead_letter_topic``, ``start``, ``batch_size``.
        """
        sub = self._subscription(topic, subscription, options)
        if batching is None:
            return InmemMessageIterator(sub)
        return InmemBatchedMessageIterator(sub, batching.size, batching.timeout)

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: ConsumerOptions, batching: Batching | None
    ) -> InmemRecordIterator:
        """Join consumer ``group`` on ``topics`` (created when missing, under ``provision="create"``)."""
        if self.provision == "verify":
            missing = [topic_resource(name) for name in topics if name not in self.broker.topics]
            if missing:
                raise ProvisioningError(self.name, missing)
        for name in topics:
            self.broker.provided_topic(name, self.settings.partitions, self.provision)
        consumer = self.log().consumer(group, topics, start=options.start)
        if batching is None:
            return InmemRecordIterator(consumer, options.batch_size, 1.0)
        return InmemBatchedRecordIterator(consumer, batching.size, batching.timeout)

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """Messages of ``subscription`` (or of the ``records()`` group) not yet acked.

        See :func:`broker.backends.inmem.backlog.backlog`; ``UnknownTopic`` for an unknown topic or name.
        """
        self._check_open()
        return _backlog(self.broker, topic, subscription)

    def log(self) -> InmemLog:
        """The ``broker.log`` port on this broker."""
        log = InmemLog(self.broker, self._partitioner, self.settings.partitions, self.provision)
        return self._track(log)  # type: ignore[no-any-return]
