"""The Google Cloud Pub/Sub backend: ``pubsub://PROJECT``.

* ``publisher()``: batching publisher (:mod:`broker.backends.pubsub.publisher`).
* ``messages()`` / ``batched_messages()``: pull-based iterators (:mod:`broker.backends.pubsub.pull`).
* ``receiver()`` / ``batched_receiver()``: streaming pull with bounded concurrency
  (:mod:`broker.backends.pubsub.receiver`).
* ``ensure_topic()`` / ``ensure_subscription()``: create what is missing up front (consumers and
  publishers also do it on first use while ``create_missing`` is on). Pub/Sub delivers to a
  subscription only what is published after it exists.

Capabilities depend on the settings: ``per_key_order`` only with ``message_ordering``, and
``delivery_attempt`` only with a ``dead_letter_topic`` (Pub/Sub counts deliveries only on
subscriptions with a dead-letter policy; elsewhere ``Message.delivery_attempt`` is None).
``dead_letter`` is claimed because ``Message.dead_letter()`` always works (forwarding to the
subscription's dead-letter topic, or dropping with a warning when it has none); dead-lettering
after a number of attempts needs ``dead_letter_topic``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, ClassVar, TypeVar

from broker import Capabilities, Provision
from broker.backends.pubsub.admin import Admin, SubscriptionInfo, ping, topic_resource
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.consuming import SubscriptionTarget
from broker.backends.pubsub.publisher import PubsubPublishDriver, PubsubPublisher
from broker.backends.pubsub.pull import PubsubBatchedMessageIterator, PubsubMessageIterator
from broker.backends.pubsub.receiver import PubsubReceiver
from broker.backends.pubsub.registration import PubsubFactory
from broker.backends.pubsub.settings import MAX_MESSAGE_BYTES, ConsumerOptions, PubsubSettings
from broker.driver.base import BackendBase
from broker.driver.options import check_batching, check_receiver_options
from broker.driver.receiving import DEFAULT_BACKOFF, DEFAULT_DRAIN_TIMEOUT, NackDelay
from broker.driver.settings import build_settings, describe
from broker.errors import ConfigError
from broker.retry import RetryPolicy

__all__ = ["BACKLOG_FOR_NEW_SUBSCRIPTIONS", "PubsubBackend", "capabilities_for"]

#: Whether a new subscription receives messages published before it existed: no. Pub/Sub
#: delivers to a subscription only what is published after it was created (a topic with no
#: subscription drops what it gets). ``Capabilities.backlog_for_new_subscriptions``.
BACKLOG_FOR_NEW_SUBSCRIPTIONS = False

_Pull = TypeVar("_Pull", PubsubMessageIterator, PubsubBatchedMessageIterator)


def capabilities_for(settings: PubsubSettings) -> Capabilities:
    """What a backend with ``settings`` supports: ``PubsubFactory.mechanisms``, two of them only
    with the settings that enable them."""
    return Capabilities.claiming(
        PubsubFactory.mechanisms,
        per_key_order=settings.message_ordering,
        delivery_attempt=settings.dead_letter_topic is not None,
        backlog_for_new_subscriptions=BACKLOG_FOR_NEW_SUBSCRIPTIONS,
        max_message_bytes=MAX_MESSAGE_BYTES,
    )


class PubsubBackend(BackendBase):
    """A connection to one Google Cloud project's Pub/Sub (or an emulator)."""

    name = "pubsub"
    #: ``verify`` looks topics and subscriptions up (``get_topic`` / ``get_subscription``) and names
    #: a missing one in a ``ProvisioningError``; ``none`` is ``create_missing=false``: nothing is
    #: created or checked and a missing resource is ``UnknownTopic``.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: PubsubSettings) -> None:
        super().__init__()
        self.settings = settings
        self._check_provision()
        self.capabilities = capabilities_for(settings)
        self.clients = Clients(settings)
        self.admin = Admin(self.clients, bool(settings.create_missing), verify=self.provision == "verify")
        self._creator = self.admin if settings.create_missing else Admin(self.clients, True)

    def __repr__(self) -> str:
        where = f" emulator={self.clients.emulator_host}" if self.clients.emulator_host else ""
        return f"<PubsubBackend {self.settings.project!r}{where}>"

    def describe(self) -> dict[str, Any]:
        """The settings, safe to log (credentials masked)."""
        return describe(self.settings)

    def _options(self, options: dict[str, Any]) -> ConsumerOptions:
        """The consumer options: ``options`` over the connection's defaults.

        Portable names map onto Pub/Sub's: ``max_attempts`` is ``max_delivery_attempts``,
        ``batch_size`` is ``pull_max_messages``, ``start`` may only be ``"latest"``. Values
        Pub/Sub cannot honour (an ack deadline outside 10..600 s, attempts outside 5..100) raise
        ``ConfigError``; nothing is clamped.
        """
        values = self.settings.consumer_defaults()
        given = {key.replace("-", "_") for key in options}
        if "max_attempts" in given and "max_delivery_attempts" not in given:
            del values["max_delivery_attempts"]  # the portable name overrides the default
        if "batch_size" in given and "pull_max_messages" not in given:
            del values["pull_max_messages"]
        values.update(options)
        return build_settings(ConsumerOptions, values, backend="pubsub")

    def _target(self, topic: str, subscription: str, options: dict[str, Any]) -> SubscriptionTarget:
        """What a consumer of ``subscription`` on ``topic`` with ``options`` reads, and through what."""
        return SubscriptionTarget(
            self.clients, self.admin, self.settings, topic, subscription, self._options(options)
        )

    # -- publishing -----------------------------------------------------------------------
    def publisher(self) -> PubsubPublisher:
        """A publisher with the client's batching (``publish_*`` settings).

        Every publisher shares the backend's one publisher client: asking for one costs no channel.
        """
        driver = self._shared_driver(lambda: PubsubPublishDriver(self.clients, self.admin, self.settings))
        return self._track(PubsubPublisher(driver, self.settings.close_timeout))  # type: ignore[no-any-return]

    # -- consuming ------------------------------------------------------------------------
    def messages(self, topic: str, subscription: str, **options: Any) -> PubsubMessageIterator:
        """Pull ``topic``'s messages through ``subscription``.

        Entering (``async with``) makes the topic and the subscription exist (unless
        ``create_missing`` is off: then a missing one raises ``UnknownTopic``), so everything
        published afterwards is delivered; without entering, the first ``next_message()`` does
        it (and it is started in the background as soon as the iterator is made).

        Options: ``ack_deadline``, ``dead_letter_topic``, ``max_attempts`` (or
        ``max_delivery_attempts``), ``batch_size`` (or ``pull_max_messages``), ``start``
        (``"latest"`` only), ``message_ordering`` (see :class:`ConsumerOptions`).
        """
        return self._pull(PubsubMessageIterator, topic, subscription, options, None)

    def batched_messages(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int = 100,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> PubsubBatchedMessageIterator:
        """Batches of up to ``batch_size``: each is what one pull returned within ``batch_timeout``."""
        check_batching(batch_size, batch_timeout, minimum_size=1)
        return self._pull(
            PubsubBatchedMessageIterator,
            topic,
            subscription,
            options,
            batch_size,
            batch_timeout=batch_timeout,
        )

    def _pull(
        self,
        kind: type[_Pull],
        topic: str,
        subscription: str,
        options: dict[str, Any],
        pull_size: int | None,
        **batching: Any,
    ) -> _Pull:
        """A pull iterator of ``kind`` pulling ``pull_size`` at a time (None: the ``batch_size``
        option), tracked, its opening started in the background."""
        target = self._target(topic, subscription, options)
        size = target.options.pull_max_messages if pull_size is None else pull_size
        iterator = kind(target, "ack_deadline" in options, size, **batching)
        self._track(iterator)
        iterator.start_opening()
        return iterator

    def receiver(
        self,
        topic: str,
        subscription: str,
        *,
        concurrency: int | None = None,
        nack_delay: NackDelay = DEFAULT_BACKOFF,
        retry: RetryPolicy | None = None,
        drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
        **options: Any,
    ) -> PubsubReceiver:
        """Streaming pull calling a handler, ``concurrency`` at a time (default ``receive_concurrency``).

        Entering (``async with``) makes the subscription exist, as for :meth:`messages`. ``retry``
        applies a :class:`broker.RetryPolicy` to failed handlers (instead of ``nack_delay``);
        ``drain_timeout`` is how long :meth:`PubsubReceiver.stop` lets running handlers finish.
        """
        check_receiver_options(
            concurrency=concurrency,
            nack_delay=nack_delay,
            drain_timeout=drain_timeout,
            retry=retry,
            default_concurrency=True,
        )
        if retry is not None and nack_delay is not DEFAULT_BACKOFF:
            raise ConfigError("give either retry= or nack_delay=, not both")
        retrier = None
        if retry is not None:
            publisher = self._publisher_for_retry(retry)
            retrier = retry.bind(publisher=publisher, topic=topic, subscription=subscription)
        if "batch_size" in options:
            raise ConfigError("receiver() hands out single messages: use batched_receiver(batch_size=...)")
        return self._receiver(
            topic,
            subscription,
            options,
            concurrency,
            nack_delay=nack_delay,
            retrier=retrier,
            drain_timeout=drain_timeout,
        )

    def batched_receiver(
        self,
        topic: str,
        subscription: str,
        *,
        batch_size: int = 100,
        batch_timeout: float = 1.0,
        concurrency: int | None = None,
        drain_timeout: float | None = DEFAULT_DRAIN_TIMEOUT,
        **options: Any,
    ) -> PubsubReceiver:
        """Streaming pull calling a handler with batches (``receive_batch``)."""
        check_batching(batch_size, batch_timeout, minimum_size=1)
        check_receiver_options(
            concurrency=concurrency,
            nack_delay=None,
            drain_timeout=drain_timeout,
            retry=None,
            default_concurrency=True,
        )
        return self._receiver(
            topic,
            subscription,
            options,
            concurrency,
            batch_size=batch_size,
            batch_timeout=batch_timeout,
            drain_timeout=drain_timeout,
        )

    def _receiver(
        self, topic: str, subscription: str, options: dict[str, Any], concurrency: int | None, **how: Any
    ) -> PubsubReceiver:
        """A tracked streaming-pull receiver, ``concurrency`` handlers at a time (None: the
        ``receive_concurrency`` setting); ``how`` are :class:`PubsubReceiver`'s keyword arguments."""
        concurrency = concurrency or self.settings.receive_concurrency
        receiver = PubsubReceiver(self._target(topic, subscription, options), concurrency, **how)
        return self._track(receiver)  # type: ignore[no-any-return]

    # -- topology -------------------------------------------------------------------------
    async def ensure_topic(self, topic: str) -> str:
        """Create ``topic`` if it does not exist (regardless of ``create_missing``); its full name."""
        self._check_open()
        return await self._creator.ensure_topic(topic)

    async def ensure_subscription(self, topic: str, subscription: str, **options: Any) -> SubscriptionInfo:
        """Create ``subscription`` on ``topic`` if missing (with the consumer ``options``); its info."""
        self._check_open()
        return await self._creator.ensure_subscription(topic, subscription, self._options(options))

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """None: the Pub/Sub client libraries have no backlog call.

        Google reports a subscription's backlog as the Cloud Monitoring metric
        ``pubsub.googleapis.com/subscription/num_undelivered_messages`` (not served by the emulator).
        """
        self._check_open()
        return None

    async def missing_resources(self) -> Sequence[str]:
        """The dead-letter topic the settings name, when it does not exist (``get_topic``): the only
        resource these settings name (topics and subscriptions are checked when first used)."""
        letters = self.settings.dead_letter_topic
        if letters is not None and await self.admin.missing_topic(letters):
            return [topic_resource(self.clients.topic_path(letters))]
        return []

    async def _ping(self, timeout: float) -> None:
        """List one topic of the project, once (no retry): the call needs the credentials and the
        project, and creates nothing. See :func:`broker.backends.pubsub.admin.ping`."""
        await ping(self.clients, timeout)

    async def _close_connection(self) -> None:
        await self.clients.close()
