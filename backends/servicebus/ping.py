"""``ServiceBusBackend.ping``: open a sending link on a client of its own, once, with no retry.

Opening a link authorizes it first (the CBS token exchange with the namespace's credentials), so
a namespace that attaches the link, or answers that the entity does not exist, has let the client
in. Nothing is sent and nothing is created.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from azure.servicebus.exceptions import MessagingEntityNotFoundError

from broker.backends.servicebus.connection import Shutdowns, close_quietly, make_client
from broker.backends.servicebus.errors import translate
from broker.backends.servicebus.settings import ServiceBusSettings
from broker.errors import ConnectionFailed

__all__ = ["PING_ENTITY", "ping"]

#: The queue or topic name the ping's link is opened to (it need not exist).
PING_ENTITY = "polybroker-ping"


async def ping(settings: ServiceBusSettings, shutdowns: Shutdowns) -> None:
    """Open a sender to :data:`PING_ENTITY`; the SDK's retries are off (one attempt).

    ``AuthenticationFailed`` when the namespace refuses the credentials, ``ConnectionFailed`` when
    it cannot be reached; the caller bounds the time. The sender and its client are closed in the
    background (``shutdowns``): the SDK's close waits for a keep-alive loop's one-second sleep.
    """
    client = make_client(dataclasses.replace(settings, retry_total=0))
    sender = client.get_queue_sender(PING_ENTITY)
    try:
        await sender.__aenter__()
    except MessagingEntityNotFoundError:
        return  # the namespace answered an authorized link: the entity's absence does not matter
    except Exception as exc:
        raise translate(exc, "pinging Service Bus (opening a link)", ConnectionFailed) from exc
    finally:
        shutdowns.start(_close(sender, client))


async def _close(sender: Any, client: Any) -> None:
    await close_quietly(sender, "the ping's sender")
    await close_quietly(client, "the ping's client")
