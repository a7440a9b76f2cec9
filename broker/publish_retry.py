"""Publish-side retries: a send middleware that tries a failed publish again when the error says it may work.

Every backend's ``translate`` classifies SDK errors into :mod:`broker.errors` classes, and each
class says whether the same call may succeed later (``BrokerError.retryable``: connection loss,
throttling, timeouts). :func:`retrying_publish` uses that classification, written once for every
backend, as a :data:`~broker.driver.publishing.SendMiddleware`::

    publisher = backend.publisher()
    publisher.wrap_send(retrying_publish(max_attempts=5))

A retryable failure is tried again after the backoff for its attempt, up to ``max_attempts`` sends
in all; anything else (a bad message, a closed publisher, permissions) is raised at once, and the
last error is raised when the attempts run out. A batch is sent again whole: messages the broker
took before the failure may be stored twice (at-least-once; Kafka's idempotent producer and
JetStream's ``Nats-Msg-Id`` de-duplication remove such copies where they are on).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence

from broker.backoff import Backoff
from broker.driver.publishing import Send, SendMiddleware
from broker.errors import BrokerError, ConfigError
from broker.message import OutboundMessage

__all__ = ["retrying_publish"]

log = logging.getLogger("broker.publish")

#: 0.1 s, doubling, at most 5 s, with equal jitter: a few seconds of broker trouble ride through.
DEFAULT_PUBLISH_BACKOFF = Backoff(0.1, 2.0, 5.0, jitter="equal")


def retrying_publish(max_attempts: int = 5, backoff: Backoff = DEFAULT_PUBLISH_BACKOFF) -> SendMiddleware:
    """A send middleware trying retryable publish failures again, ``max_attempts`` sends in all."""
    if not isinstance(max_attempts, int) or max_attempts < 1:
        raise ConfigError(f"max_attempts must be an int >= 1, got {max_attempts!r}")
    if not isinstance(backoff, Backoff):
        raise ConfigError(f"backoff must be a broker.backoff.Backoff, got {backoff!r}")

    async def retrying(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
        attempt = 1
        while True:
            try:
                await send(messages)
                return
            except BrokerError as exc:
                if not exc.retryable or attempt >= max_attempts:
                    raise
                delay = backoff.delay(attempt)
                log.warning(
                    "publishing %d messages to %r failed (attempt %d of %d): %r; again in %.2fs",
                    len(messages),
                    topic,
                    attempt,
                    max_attempts,
                    exc,
                    delay,
                )
            await asyncio.sleep(delay)
            attempt += 1

    return retrying
