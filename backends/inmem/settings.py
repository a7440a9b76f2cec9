"""Settings of the in-memory backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from broker.driver.provision import Provision
from broker.driver.settings import (
    check_at_least,
    check_positive,
    field_values,
    normalize_choices,
    options_from,
)
from broker.errors import ConfigError

__all__ = ["ConsumerOptions", "InmemSettings"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()`` / ``records()`` (defaults come from :class:`InmemSettings`).

    :class:`InmemSettings` inherits these fields: they are declared here only.
    """

    #: Seconds a delivered message may stay unsettled before it is redelivered.
    ack_deadline: float = 30.0
    #: Deliveries after which a message is dead-lettered instead of redelivered (None: never).
    max_attempts: int | None = None
    #: Topic that dead-lettered messages are published to (None: they are dropped, with a warning).
    dead_letter_topic: str | None = None
    #: Where a new subscription or group starts: the oldest retained message, or only new ones.
    start: Literal["earliest", "latest"] = "earliest"
    #: Largest batch a batched consumer returns.
    batch_size: int = 100

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_positive("seconds", ack_deadline=self.ack_deadline)
        if self.max_attempts is not None:
            check_at_least(1, max_attempts=self.max_attempts)
        check_at_least(1, batch_size=self.batch_size)


@dataclass(frozen=True, slots=True)
class InmemSettings(ConsumerOptions):
    """``inmem://NAME?partitions=4&ack_deadline=10``: the process-wide broker called NAME.

    The consumer fields (keyword-only) are inherited from :class:`ConsumerOptions`: they are the
    defaults that ``messages()`` / ``records()`` keyword options override per consumer.
    """

    #: Brokers with the same name in one process are the same broker.
    name: str = "default"
    #: Partition count of topics this connection creates implicitly (on first publish or consume).
    partitions: int = 1
    #: ``murmur2`` (Kafka's default) or ``fnv1a`` (goka's).
    partitioner: Literal["murmur2", "fnv1a"] = "murmur2"
    #: ``create`` makes missing topics and subscriptions on first use; ``verify`` makes none and raises
    #: ``ProvisioningError`` naming them (``ping()`` checks ``dead_letter_topic``); ``none`` makes none and
    #: lets ``UnknownTopic`` surface (:mod:`broker.driver.provision`).
    provision: Provision = "create"

    def __post_init__(self) -> None:
        normalize_choices(self)
        check_at_least(1, partitions=self.partitions)
        if not self.name:
            raise ConfigError("the in-memory broker needs a non-empty name")
        options_from(ConsumerOptions, self)  # validates the consumer defaults

    def consumer_defaults(self) -> dict[str, Any]:
        """The consumer options this connection uses unless a consumer overrides them."""
        return field_values(ConsumerOptions, self)
