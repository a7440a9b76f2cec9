"""Capability flags: what a backend can do, read by users and by the conformance suite."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, fields
from typing import Any

__all__ = ["Capabilities"]


@dataclass(frozen=True, slots=True)
class Capabilities:
    """What a backend supports. Every flag defaults to False (or None for limits)."""

    #: Messages survive a restart of the broker.
    persistent: bool = False
    #: Messages with the same key are delivered in publish order (to a single consumer).
    per_key_order: bool = False
    #: Per-message consumption (``Backend.messages``) exists.
    messages: bool = False
    #: Partitioned-log consumption (``Backend.records``) exists.
    records: bool = False
    #: ``Message.nack()`` redelivers the message.
    nack_redelivers: bool = False
    #: ``Message.nack(delay=...)`` honours the delay.
    delayed_nack: bool = False
    #: An unsettled message is redelivered after the consumer's ack deadline.
    ack_deadline: bool = False
    #: ``Message.in_progress()`` extends the deadline.
    in_progress: bool = False
    #: ``Message.delivery_attempt`` counts deliveries.
    delivery_attempt: bool = False
    #: ``Message.dead_letter()`` and dead-lettering after a maximum of delivery attempts.
    dead_letter: bool = False
    #: Several consumers of one subscription split the messages between them.
    competing_consumers: bool = False
    #: ``Backend.transactional_publisher()`` exists.
    transactions: bool = False
    #: Records can be re-read from an earlier offset.
    replay: bool = False
    #: A subscription created after messages were published still receives them (the broker keeps
    #: a topic's messages without subscriptions: Kafka, JetStream, in-memory). False where a new
    #: subscription starts empty (Pub/Sub, Pulsar without retention, Service Bus topics).
    backlog_for_new_subscriptions: bool = False
    #: The largest payload the broker accepts, in bytes (None: not known or unlimited).
    max_message_bytes: int | None = None

    @classmethod
    def claiming(cls, flags: Iterable[str], /, **values: Any) -> Capabilities:
        """Capabilities with every flag named in ``flags`` set, then ``values`` over them.

        A backend declares what it can do once: its factory's ``mechanisms`` names each capability
        with the native mechanism behind it (the capability matrix shows it), and its capabilities
        claim those; ``values`` holds what depends on the settings, and the limits
        (``max_message_bytes``). A name that is not a flag raises ``ValueError``.
        """
        names = [f.name for f in fields(cls) if f.type in ("bool", bool)]
        claimed = dict.fromkeys(flags, True)
        unknown = sorted(set(claimed) - set(names))
        if unknown:
            raise ValueError(f"not capability flags: {', '.join(unknown)}")
        return cls(**{**claimed, **values})

    def supported(self) -> list[str]:
        """Names of the flags that are set."""
        return [f.name for f in fields(self) if getattr(self, f.name) is True]
