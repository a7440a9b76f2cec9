"""Settings of the in-memory backend."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from broker.errors import ConfigError

__all__ = ["ConsumerOptions", "InmemSettings"]


@dataclass(frozen=True, slots=True)
class ConsumerOptions:
    """Per-consumer options of ``messages()`` / ``records()`` (defaults come from :class:`InmemSettings`)."""

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
        if self.ack_deadline <= 0:
            raise ConfigError(f"ack_deadline must be > 0 seconds, got {self.ack_deadline}")
        if self.max_attempts is not None and self.max_attempts < 1:
            raise ConfigError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")


@dataclass(frozen=True, slots=True)
class InmemSettings:
    """``inmem://NAME?partitions=4&ack_deadline=10``: the process-wide broker called NAME."""

    #: Brokers with the same name in one process are the same broker.
    name: str = "default"
    #: Partition count of topics this connection creates implicitly (on first publish or consume).
    partitions: int = 1
    #: ``murmur2`` (Kafka's default) or ``fnv1a`` (goka's).
    partitioner: str = "murmur2"
    ack_deadline: float = 30.0
    max_attempts: int | None = None
    dead_letter_topic: str | None = None
    start: Literal["earliest", "latest"] = "earliest"
    batch_size: int = 100

    def __post_init__(self) -> None:
        if self.partitions < 1:
            raise ConfigError(f"partitions must be >= 1, got {self.partitions}")
        if not self.name:
            raise ConfigError("the in-memory broker needs a non-empty name")
        ConsumerOptions(
            self.ack_deadline, self.max_attempts, self.dead_letter_topic, self.start, self.batch_size
        )

    def consumer_defaults(self) -> dict[str, object]:
        """The consumer options this connection uses unless a consumer overrides them."""
        return {
            "ack_deadline": self.ack_deadline,
            "max_attempts": self.max_attempts,
            "dead_letter_topic": self.dead_letter_topic,
            "start": self.start,
            "batch_size": self.batch_size,
        }
