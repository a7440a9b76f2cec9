"""``Message.dead_letter()`` on Pub/Sub: forward a message to its subscription's dead-letter topic.

Pub/Sub dead-letters by itself after ``max_delivery_attempts``; a consumer that gives up on a
message earlier publishes it to the same dead-letter topic, with the reason in attributes, and
acks it. Without a dead-letter policy the message is acked and dropped, with a warning.
"""

from __future__ import annotations

import asyncio
import logging

from google.pubsub_v1.types import PubsubMessage

from broker import Message
from broker.backends.pubsub.admin import SubscriptionInfo
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.errors import translate
from broker.backends.pubsub.mapping import KEY_ATTRIBUTE, raw_ordering_key
from broker.errors import AckError

__all__ = ["forward_dead_letter"]

log = logging.getLogger("broker.backends.pubsub")


async def forward_dead_letter(
    clients: Clients, info: SubscriptionInfo, message: Message, reason: str | None, timeout: float = 30.0
) -> bool:
    """Publish ``message`` to ``info``'s dead-letter topic; False (after a warning) when it has none.

    The copy keeps data, key (as it came: ordering key or attribute) and attributes, plus
    ``dead_letter_reason``, ``dead_letter_source`` (the subscription) and ``delivery_attempts``.
    """
    why = reason or "dead-lettered by the consumer"
    if info.dead_letter_topic is None:
        log.warning(
            "dropping message %s of %s (%s): the subscription has no dead-letter topic",
            message.id,
            info.path,
            why,
        )
        return False
    attributes = dict(message.attributes)
    attributes.update(
        {
            "dead_letter_reason": why,
            "dead_letter_source": info.path,
            "delivery_attempts": str(message.delivery_attempt or 1),
        }
    )
    ordering_key = raw_ordering_key(message)
    if message.key is not None and not ordering_key:
        attributes[KEY_ATTRIBUTE] = message.key
    copy = PubsubMessage(data=message.data, attributes=attributes, ordering_key=ordering_key)
    try:
        async with asyncio.timeout(timeout):  # the client's retries outlast its per-attempt timeout
            await clients.admin_publisher().publish(
                topic=info.dead_letter_topic, messages=[copy], timeout=timeout
            )
    except Exception as exc:
        raise translate(
            exc, f"dead-lettering message {message.id} to {info.dead_letter_topic}", AckError
        ) from exc
    return True
