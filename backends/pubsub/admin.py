"""Topics and subscriptions: looking them up, and creating them when missing.

Each topic and subscription is looked up once per backend (a ``get`` first, so a principal
that may only publish or consume never needs the ``create`` permission); a missing one is
created when ``create_missing`` is on, including its dead-letter policy and message ordering,
and otherwise reported as :class:`~broker.errors.UnknownTopic`.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import TypeVar

from google.api_core import exceptions as api_exceptions
from google.pubsub_v1.types import DeadLetterPolicy, Subscription

from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.errors import translate
from broker.backends.pubsub.settings import ConsumerOptions
from broker.errors import BrokerError, ConfigError, ConnectionFailed, ProvisioningError, UnknownTopic

__all__ = ["Admin", "SubscriptionInfo", "ping", "subscription_resource", "topic_resource"]

T = TypeVar("T")

log = logging.getLogger("broker.backends.pubsub")

_RPC_TIMEOUT = 30.0
#: The topic the server names for a subscription whose topic was deleted (a detached subscription).
_DELETED_TOPIC = "_deleted-topic_"


@dataclass(frozen=True, slots=True)
class SubscriptionInfo:
    """What consumers need to know about a subscription, as the server has it."""

    #: ``projects/P/subscriptions/S``.
    path: str
    #: ``projects/P/topics/T``.
    topic: str
    #: The subscription's ack deadline in seconds.
    ack_deadline: int
    #: Full name of the dead-letter topic, or None without a dead-letter policy.
    dead_letter_topic: str | None
    #: Deliveries before dead-lettering (0 without a policy).
    max_delivery_attempts: int
    #: Whether messages with the same ordering key are delivered in order.
    message_ordering: bool

    @staticmethod
    def of(subscription: Subscription) -> SubscriptionInfo:
        """The info of a subscription resource."""
        policy = subscription.dead_letter_policy
        dead_letter = policy.dead_letter_topic if policy else ""
        return SubscriptionInfo(
            path=subscription.name,
            topic=subscription.topic,
            ack_deadline=subscription.ack_deadline_seconds or 10,
            dead_letter_topic=dead_letter or None,
            max_delivery_attempts=policy.max_delivery_attempts if dead_letter else 0,
            message_ordering=bool(subscription.enable_message_ordering),
        )


class Admin:
    """Looks up and creates topics and subscriptions; remembers what it has seen."""

    def __init__(self, clients: Clients, create_missing: bool, *, verify: bool = False) -> None:
        self.clients = clients
        self.create_missing = create_missing
        #: ``provision="verify"``: a missing resource is a ``ProvisioningError`` naming it (else,
        #: with ``create_missing`` off, the broker's ``UnknownTopic``).
        self.verify = verify
        self._topics: dict[str, asyncio.Future[str]] = {}
        self._subscriptions: dict[str, asyncio.Future[SubscriptionInfo]] = {}

    async def _once(
        self, cache: dict[str, asyncio.Future[T]], key: str, make: Callable[[], Awaitable[T]]
    ) -> T:
        known = cache.get(key)
        if known is not None and known.get_loop() is asyncio.get_running_loop():
            if not known.done() or known.exception() is None:
                return await asyncio.shield(known)
        future: asyncio.Future[T] = asyncio.ensure_future(make())
        cache[key] = future
        try:
            return await asyncio.shield(future)
        except BaseException:
            if future.done() and not future.cancelled() and future.exception() is not None:
                cache.pop(key, None)  # a failure is not remembered: the next call tries again
            raise

    async def ensure_topic(self, name: str) -> str:
        """The topic's full name; created when missing and ``create_missing`` is on."""
        path = self.clients.topic_path(name)
        return await self._once(self._topics, path, lambda: self._ensure_topic(path))

    async def _ensure_topic(self, path: str) -> str:
        client = self.clients.admin_publisher()
        try:
            await client.get_topic(topic=path, timeout=_RPC_TIMEOUT)
            return path
        except api_exceptions.NotFound as exc:
            if self.verify:
                raise ProvisioningError("pubsub", [topic_resource(path)]) from exc
            if not self.create_missing:
                raise UnknownTopic(f"topic {path} does not exist (and create_missing is off)") from exc
        except Exception as exc:
            raise translate(exc, f"looking up topic {path}", BrokerError) from exc
        try:
            await client.create_topic(name=path, timeout=_RPC_TIMEOUT)
            log.info("created topic %s", path)
        except api_exceptions.AlreadyExists:
            pass  # created by someone else meanwhile
        except Exception as exc:
            raise translate(exc, f"creating topic {path}", BrokerError) from exc
        return path

    async def ensure_subscription(self, topic: str, name: str, options: ConsumerOptions) -> SubscriptionInfo:
        """The subscription as the server has it; created (with ``options``) when missing.

        Subscription names are project-wide: a subscription of another topic is a
        :class:`~broker.errors.ConfigError` naming that topic (renaming it here would orphan the
        existing subscription and its backlog); a subscription whose topic was deleted (detached)
        is one saying it must be deleted and created again."""
        path = self.clients.subscription_path(name)
        info = await self._once(
            self._subscriptions, path, lambda: self._ensure_subscription(topic, path, options)
        )
        topic_path = self.clients.topic_path(topic)
        if info.topic == _DELETED_TOPIC:
            raise ConfigError(
                f"subscription {name!r} is detached: its topic was deleted, and Pub/Sub never "
                f"reattaches a subscription, even to a topic recreated with the same name; delete "
                f"subscription {name!r} and create it again (for topic {topic!r})"
            )
        if info.topic != topic_path:
            raise ConfigError(
                f"subscription {name!r} belongs to topic {info.topic}, not to {topic_path}: Pub/Sub "
                f"subscription names are project-wide, so give topic {topic!r} a subscription name of "
                "its own (the existing subscription and its backlog are left as they are)"
            )
        return info

    async def _ensure_subscription(self, topic: str, path: str, options: ConsumerOptions) -> SubscriptionInfo:
        client = self.clients.async_subscriber()
        try:
            found = await client.get_subscription(subscription=path, timeout=_RPC_TIMEOUT)
            return self._checked(SubscriptionInfo.of(found), options)
        except api_exceptions.NotFound as exc:
            if self.verify:
                missing = [subscription_resource(path)]
                if await self.missing_topic(topic):
                    missing.append(topic_resource(self.clients.topic_path(topic)))
                raise ProvisioningError("pubsub", missing) from exc
            if not self.create_missing:
                raise UnknownTopic(f"subscription {path} does not exist (and create_missing is off)") from exc
        except Exception as exc:
            raise translate(exc, f"looking up subscription {path}", BrokerError) from exc
        topic_path = await self.ensure_topic(topic)
        request = Subscription(
            name=path,
            topic=topic_path,
            ack_deadline_seconds=options.lease_seconds,
            enable_message_ordering=options.message_ordering,
        )
        if options.dead_letter_topic is not None:
            dead_letter = await self.ensure_topic(options.dead_letter_topic)
            request.dead_letter_policy = DeadLetterPolicy(
                dead_letter_topic=dead_letter, max_delivery_attempts=options.attempts
            )
        try:
            created = await client.create_subscription(request=request, timeout=_RPC_TIMEOUT)
            log.info("created subscription %s on %s", path, topic_path)
        except api_exceptions.AlreadyExists:
            created = await client.get_subscription(subscription=path, timeout=_RPC_TIMEOUT)
        except Exception as exc:
            raise translate(exc, f"creating subscription {path}", BrokerError) from exc
        return SubscriptionInfo.of(created)

    async def missing_topic(self, name: str) -> bool:
        """True when topic ``name`` does not exist (``get_topic``; creates nothing)."""
        path = self.clients.topic_path(name)
        try:
            await self.clients.admin_publisher().get_topic(topic=path, timeout=_RPC_TIMEOUT)
        except api_exceptions.NotFound:
            return True
        except Exception as exc:
            raise translate(exc, f"looking up topic {path}", BrokerError) from exc
        return False

    def _checked(self, info: SubscriptionInfo, options: ConsumerOptions) -> SubscriptionInfo:
        if options.message_ordering and not info.message_ordering:
            log.warning(
                "subscription %s exists without message ordering; one key's messages may arrive out of order",
                info.path,
            )
        if options.dead_letter_topic is not None and info.dead_letter_topic is None:
            log.warning("subscription %s exists without a dead-letter policy; none is added", info.path)
        return info


def topic_resource(path: str) -> str:
    """How a ``ProvisioningError`` names the topic ``path``."""
    return f"topic {path!r}"


def subscription_resource(path: str) -> str:
    """How a ``ProvisioningError`` names the subscription ``path``."""
    return f"subscription {path!r}"


async def ping(clients: Clients, timeout: float) -> None:
    """Ask for the first topic of the project, once, within ``timeout`` seconds.

    Not retried (the SDK's default policy retries an unreachable server for a minute): a refused
    or unreachable endpoint is an error at once (``ConnectionFailed``, or ``AuthenticationFailed``
    for refused credentials).
    """
    project = f"projects/{clients.settings.project}"
    try:
        pager = await clients.admin_publisher().list_topics(
            request={"project": project, "page_size": 1}, retry=None, timeout=timeout
        )
        async for _ in pager:
            break
    except Exception as exc:
        raise translate(exc, f"pinging Pub/Sub (listing the topics of {project})", ConnectionFailed) from exc
