"""What every consumer of a Pub/Sub subscription shares: what it reads, ``async with``, the closed check.

Both the pull iterators (:mod:`broker.backends.pubsub.pull`) and the streaming receiver
(:mod:`broker.backends.pubsub.receiver`) read one subscription of one topic, make it exist when
entered, and refuse to work once closed. The backend describes what they read once, as a
:class:`SubscriptionTarget`.
"""

from __future__ import annotations

import abc
from dataclasses import dataclass
from typing import ClassVar, Self

from broker.backends.pubsub.admin import Admin, SubscriptionInfo
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.settings import ConsumerOptions, PubsubSettings
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError

__all__ = ["SubscriptionConsumer", "SubscriptionTarget"]


@dataclass(frozen=True, slots=True)
class SubscriptionTarget:
    """What a consumer reads (``subscription`` of ``topic``, made with ``options``) and through what."""

    clients: Clients
    admin: Admin
    settings: PubsubSettings
    topic: str
    subscription: str
    options: ConsumerOptions


class SubscriptionConsumer(AsyncResource):
    """A consumer of one subscription of one topic; entering it makes the subscription exist."""

    #: How the consumer is named in errors.
    _kind: ClassVar[str] = "Pub/Sub consumer"

    def __init__(self, target: SubscriptionTarget) -> None:
        self._clients = target.clients
        self._admin = target.admin
        self._settings = target.settings
        self.topic = target.topic
        self.subscription = target.subscription
        self.options = target.options
        self._closed = False

    async def __aenter__(self) -> Self:
        """Entering makes the subscription exist: what is published from then on is delivered here."""
        await self.open()
        return self

    @abc.abstractmethod
    async def open(self) -> SubscriptionInfo:
        """Look up (or create) the subscription."""

    def _check_open(self) -> None:
        if self._closed:
            raise ClosedError(f"the {self._kind} of {self.topic}/{self.subscription} is closed")

    async def _ensure_subscription(self) -> SubscriptionInfo:
        """Look up the subscription, creating it (with this consumer's options) if it does not exist."""
        return await self._admin.ensure_subscription(self.topic, self.subscription, self.options)
