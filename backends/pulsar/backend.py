"""The Pulsar backend: ``pulsar://host:6650``."""

from __future__ import annotations

import asyncio
import logging
import threading
from typing import Any, ClassVar, Final

from broker import Capabilities, OutboundMessage, Provision, adapt
from broker.backends.pulsar.callbacks import outcome, settle, wait
from broker.backends.pulsar.client import create_client
from broker.backends.pulsar.consumer import (
    CLOSE_TIMEOUT,
    PulsarBatchedMessageIterator,
    PulsarMessageIterator,
    Subscription,
    SubscriptionTarget,
)
from broker.backends.pulsar.publisher import PulsarPublishDriver, PulsarPublisher
from broker.backends.pulsar.records import PulsarReader, PulsarRecordIterator
from broker.backends.pulsar.registration import PulsarFactory
from broker.backends.pulsar.settings import ConsumerOptions, PulsarSettings
from broker.driver.base import BackendBase, Batching
from broker.errors import BrokerError, ConnectionFailed, PermissionDenied, UnknownTopic

__all__ = ["MAX_MESSAGE_BYTES", "PulsarBackend", "capabilities_for"]

log = logging.getLogger("broker.backends.pulsar")

#: Apache Pulsar's default ``maxMessageSize`` (5 MiB); brokers can be configured otherwise.
MAX_MESSAGE_BYTES: Final = 5 * 1024 * 1024


def capabilities_for(settings: PulsarSettings) -> Capabilities:
    """What the backend does with ``settings``: ``PulsarFactory.mechanisms``, with the subscription
    type deciding order and sharing."""
    kind = settings.subscription_type
    return Capabilities.claiming(
        PulsarFactory.mechanisms,
        per_key_order=kind != "shared",
        competing_consumers=kind in ("shared", "key_shared"),
        max_message_bytes=MAX_MESSAGE_BYTES,
    )


#: The topic whose partitions ``ping()`` looks up (it need not exist; nothing is created).
PING_TOPIC: Final = "persistent://public/default/polybroker-ping"


async def _dial(service_url: str) -> None:
    """Open (and close) a TCP connection to one of the service URL's hosts.

    The client retries a refused connection until its operation timeout; when every host refuses
    (nothing listens there) this raises ``ConnectionFailed`` at once.
    """
    scheme, _, rest = service_url.partition("://")
    default_port = 6651 if scheme == "pulsar+ssl" else 6650
    refusals: list[str] = []
    for host_port in rest.split("/", 1)[0].split(","):
        host, _, port = host_port.strip().rpartition(":") if ":" in host_port else (host_port, "", "")
        try:
            _, writer = await asyncio.open_connection(host.strip("[]"), int(port or default_port))
        except OSError as exc:
            refusals.append(f"{host_port.strip()}: {exc.strerror or exc}")
            continue
        writer.close()
        return
    raise ConnectionFailed(f"pinging Pulsar: no broker of {service_url} answers ({'; '.join(refusals)})")


class PulsarBackend(BackendBase):
    """A connection to a Pulsar cluster: one client shared by every publisher and consumer it opens.

    ``messages()`` / ``batched_messages()`` consume a subscription (``shared`` by default: competing
    consumers); ``records()`` reads topics as a log through a durable failover subscription named
    after the group; :meth:`reader` replays a topic from a message id. Consumer options are the
    fields of :class:`~broker.backends.pulsar.settings.ConsumerOptions` (``ack_timeout``,
    ``nack_redelivery_delay``, ``max_attempts``, ``dead_letter_topic``, ``subscription_type``, ...),
    defaulting to the backend's settings.
    """

    name = "pulsar"
    #: ``create`` and ``none`` differ in nothing this client does: Pulsar creates topics and
    #: subscriptions when a producer or consumer attaches, as the broker's auto-creation policy
    #: allows (``allowAutoTopicCreation``, ``allowAutoSubscriptionCreation``), and the client has no
    #: switch to ask otherwise. ``none`` says the estate's policy decides: with auto-creation off a
    #: missing topic is the broker's ``TopicNotFound`` (``UnknownTopic``). ``verify`` is not offered:
    #: the binary protocol cannot tell whether a topic exists (a lookup answers for any name, and
    #: pulsar-lite serves no admin REST API to ask instead).
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "none")

    def __init__(self, settings: PulsarSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or PulsarSettings()
        self._check_provision()
        self.capabilities = capabilities_for(self.settings)
        self._client = create_client(self.settings)
        self._dead_letters: PulsarPublisher | None = None

    def __repr__(self) -> str:
        return f"<PulsarBackend {self.settings.url}>"

    @property
    def client(self) -> Any:
        """The ``_pulsar.Client`` underneath, an escape hatch for Pulsar-specific features."""
        return self._client

    def publisher(self) -> PulsarPublisher:
        """A publisher; each topic gets one producer, made on its first publish and shared by every
        publisher of this backend (asking for a publisher costs no producer)."""
        driver = self._shared_driver(lambda: PulsarPublishDriver(self._client, self.settings))
        return self._track(PulsarPublisher(driver))  # type: ignore[no-any-return]

    async def _dead_letter(self, topic: str, message: OutboundMessage) -> None:
        if self._dead_letters is None:
            self._dead_letters = self.publisher()
        await self._dead_letters.topic(topic).publish(message)

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return self.settings.consumer_options(options)

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> PulsarMessageIterator | PulsarBatchedMessageIterator:
        """Consume ``topic`` through ``subscription`` (created on first use; kept when closed);
        batches are the messages that are ready, up to the batch size."""
        target = SubscriptionTarget(self._client, topic, subscription, options, self._dead_letter)
        if batching is None:
            return PulsarMessageIterator(target)
        return PulsarBatchedMessageIterator(target, batching.size, batching.timeout)

    def _record_options(self, options: dict[str, Any]) -> ConsumerOptions:
        """A records() group is a durable failover subscription unless ``subscription_type`` says."""
        return self.settings.consumer_options({"subscription_type": "failover", **options})

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: ConsumerOptions, batching: Batching | None
    ) -> Any:
        """Read ``topics`` as logs in consumer group ``group``; ``initial_position`` (default
        ``earliest``) decides where a new group starts. Batches come from ``broker.adapt``."""
        records = PulsarRecordIterator(self._client, topics, group, options)
        if batching is None:
            return records
        return adapt.batched_records(records, batching.size, batching.timeout)

    def reader(
        self,
        topic: str,
        start: Any = "earliest",
        *,
        inclusive: bool = False,
        receiver_queue_size: int | None = None,
    ) -> PulsarReader:
        """Replay ``topic`` from ``start``: ``"earliest"``, ``"latest"``, a ``Message.id``, Message or Record.

        ``inclusive`` also returns the message at ``start``. A reader keeps no state on the broker.
        """
        self._check_open()
        size = receiver_queue_size or self.settings.receiver_queue_size
        reader = PulsarReader(self._client, topic, start, inclusive=inclusive, receiver_queue_size=size)
        return self._track(reader)  # type: ignore[no-any-return]

    async def create_subscription(self, topic: str, subscription: str, **options: Any) -> None:
        """Make ``subscription`` exist on ``topic`` (from ``initial_position``) without consuming.

        Pulsar keeps messages only for subscriptions that exist, so create one before publishing
        what it must see.
        """
        self._check_open()
        opts = self.settings.consumer_options(options)
        created = Subscription(self._client, topic, subscription, opts, 1, receive=False)
        try:
            await created.open()
        finally:
            await created.close()

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """None: the Pulsar client has no backlog call.

        Pulsar reports a subscription's ``msgBacklog`` in the topic stats of its admin REST API
        (``pulsar-admin topics stats``), which this backend does not use and pulsar-lite does not serve.
        """
        self._check_open()
        return None

    async def _ping(self, timeout: float) -> None:
        """Look up the partitions of :data:`PING_TOPIC` (a lookup creates nothing).

        The client connects and authenticates first; a broker that then refuses the lookup
        (no permission on the namespace, or no such namespace) has answered an authenticated
        client, which is what a ping asks.
        """
        await _dial(self.settings.url)
        future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._client.get_topic_partitions_async(PING_TOPIC, outcome(future))
        try:
            await wait(future, "pinging Pulsar (a topic lookup)", ConnectionFailed, timeout)
        except (PermissionDenied, UnknownTopic):
            return

    async def _close_connection(self) -> None:
        """Close the client on a thread of its own, waiting at most :data:`CLOSE_TIMEOUT`.

        Not ``close_async``: the client runs that callback on a thread it starts for the purpose
        and releases the Python callable there after the call, which can race the interpreter's
        shutdown (observed as a crash at exit). The blocking ``close()`` runs no Python callback.
        """
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        client = self._client

        def close() -> None:
            failure: BaseException | None = None
            try:
                client.close()
            except BaseException as exc:  # handed to the loop
                failure = exc
            settle(future, failure, None)

        threading.Thread(target=close, name="pulsar-client-close", daemon=True).start()
        try:
            await wait(future, "closing the Pulsar client", ConnectionFailed, CLOSE_TIMEOUT)
        except (BrokerError, TimeoutError) as exc:
            log.warning("closing the Pulsar client: %s", exc)
