"""The Azure Service Bus backend: ``servicebus://NAMESPACE`` or a connection string.

Names: ``publisher().topic(name)`` sends to the queue or topic ``name``.
``messages(topic, subscription)`` reads the queue ``topic`` when ``subscription`` is empty or
equal to ``topic``, and otherwise the subscription ``subscription`` of the topic ``topic``.
Service Bus creates nothing on first use; with ``create_missing`` (the default) the backend does,
through the management API (:mod:`broker.backends.servicebus.admin`): entering a consumer creates its
queue, or its topic and subscription (with a lock duration of ``ack_deadline``), and a publish to a
missing name creates a topic. Lock duration and max delivery count of existing entities are
entity properties, set where the entity is defined.

Portable consumer options (:mod:`broker.driver.options`): ``ack_deadline`` - the consumer renews the lock
of each message it handed out until the deadline and abandons it then; an entity whose lock
duration is longer than ``ack_deadline`` cannot honour it after a consumer dies, which is a
``ConfigError`` at the first message. ``max_attempts`` - a nack of that delivery, or receiving a
message delivered more often (its lock expired), dead-letters it; the entity's MaxDeliveryCount
still applies and must be higher. ``dead_letter_topic`` - dead-lettered messages are sent there
(with ``DeadLetterReason``/``DeadLetterErrorDescription`` attributes) instead of ``$DeadLetterQueue``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from broker import Capabilities, Provision
from broker.backends.servicebus.admin import EntityAdmin
from broker.backends.servicebus.backlog import BacklogReader
from broker.backends.servicebus.connection import Shutdowns
from broker.backends.servicebus.consumer import (
    Entity,
    ReceiveTarget,
    ServiceBusBatchedMessageIterator,
    ServiceBusMessageIterator,
)
from broker.backends.servicebus.ping import ping
from broker.backends.servicebus.publisher import ServiceBusPublishDriver, ServiceBusPublisher
from broker.backends.servicebus.registration import ServiceBusFactory
from broker.backends.servicebus.settings import ConsumerOptions, ServiceBusSettings
from broker.driver.base import BackendBase, Batching
from broker.driver.options import build_consumer_options
from broker.errors import ConfigError

__all__ = ["CAPABILITIES", "ServiceBusBackend"]

#: Per-key order is guaranteed only within a session, so it is claimed only when keys are session
#: ids and consumers receive by session (see ``ServiceBusBackend``). The largest message depends on
#: the namespace's tier (256 KiB Standard, up to 100 MiB Premium); the SDK reads it from the link.
#: The other claims and their mechanisms are ``ServiceBusFactory.mechanisms``.
CAPABILITIES = Capabilities.claiming(ServiceBusFactory.mechanisms)


def _endpoint(settings: ServiceBusSettings) -> str:
    """The namespace host, for reprs (never a credential)."""
    if settings.connection_string is None:
        return settings.fully_qualified_namespace or "?"
    for part in settings.connection_string.split(";"):
        name, _, value = part.partition("=")
        if name.strip().lower() == "endpoint":
            return value.strip().split("://", 1)[-1].rstrip("/")
    return "?"


class ServiceBusBackend(BackendBase):
    """A connection to one Service Bus namespace (each publisher and consumer has its own AMQP connection)."""

    name = "servicebus"
    #: ``verify`` looks entities up through the management API (``get_queue``, ``get_topic``,
    #: ``get_subscription``) and names a missing one in a ``ProvisioningError``; ``none`` is
    #: ``create_missing=false``: nothing is created or checked and a missing one is ``UnknownTopic``.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")
    capabilities = CAPABILITIES

    def __init__(self, settings: ServiceBusSettings) -> None:
        super().__init__()
        self.settings = settings
        self._check_provision()
        self._shutdowns = Shutdowns()
        self.admin = EntityAdmin(settings)
        self._backlog = BacklogReader(self.admin)
        if settings.key_to == "session_id" and settings.sessions:
            self.capabilities = dataclasses.replace(CAPABILITIES, per_key_order=True)

    def __repr__(self) -> str:
        return f"<ServiceBusBackend {_endpoint(self.settings)}>"

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return build_consumer_options(
            ConsumerOptions, self.settings, options, native_names={}, backend=self.name
        )

    @staticmethod
    def _entity(topic: str, subscription: str) -> Entity:
        if not isinstance(topic, str) or not topic:
            raise ConfigError(f"a queue or topic name is needed, got {topic!r}")
        if not isinstance(subscription, str):
            raise ConfigError(f"the subscription must be a string, got {subscription!r}")
        if not subscription or subscription == topic:
            return Entity(topic, None)
        return Entity(topic, subscription)

    def publisher(self) -> ServiceBusPublisher:
        """A publisher; ``topic(name)`` sends to the queue or topic ``name``."""
        driver = self._shared_driver(
            lambda: ServiceBusPublishDriver(self.settings, self._shutdowns, self.admin)
        )
        return self._track(ServiceBusPublisher(driver))  # type: ignore[no-any-return]

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> ServiceBusMessageIterator | ServiceBusBatchedMessageIterator:
        """Receive from queue ``topic`` (``subscription`` empty or ``== topic``) or from a subscription.

        Options (defaults from the settings): ``receive_mode``, ``prefetch``, ``max_wait``,
        ``lock_renewal``, ``sessions``, ``session_id``, ``sub_queue``, and the portable
        ``ack_deadline``, ``max_attempts``, ``dead_letter_topic`` (see the module docstring);
        batches of up to 5000.
        """
        entity = self._entity(topic, subscription)
        target = ReceiveTarget(self.settings, entity, options, self._shutdowns, self.admin)
        if batching is None:
            return ServiceBusMessageIterator(target)
        return ServiceBusBatchedMessageIterator(target, batching.size, batching.timeout)

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """``active_message_count`` of the queue or subscription (names as for :meth:`messages`).

        None where the management API reports no counts or cannot be used; ``UnknownTopic`` when
        the entity does not exist. See :mod:`broker.backends.servicebus.backlog`.
        """
        self._check_open()
        entity = self._entity(topic, subscription)
        return await self._backlog.backlog(entity.topic, entity.subscription)

    async def missing_resources(self) -> Sequence[str]:
        """The queue or topic the settings' ``dead_letter_topic`` names, when neither exists (the
        only entity these settings name; the others are checked when first used)."""
        letters = self.settings.dead_letter_topic
        if letters is not None and await self.admin.missing_entity(letters):
            return [f"queue or topic {letters!r}"]
        return []

    async def _ping(self, timeout: float) -> None:
        """Open a link, once (see :mod:`broker.backends.servicebus.ping`)."""
        await ping(self.settings, self._shutdowns)

    async def _close_connection(self) -> None:
        """Wait (bounded) for the SDK receivers, senders and connections to finish closing."""
        await self._shutdowns.wait()
        await self._backlog.close()
        await self.admin.close()
