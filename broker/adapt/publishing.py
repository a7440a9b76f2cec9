"""Publishing helpers for backends with no native batch publish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

from broker.adapt._common import run_until_first_error
from broker.interfaces import Topic
from broker.message import OutboundMessage

__all__ = ["publish_concurrently"]


async def publish_concurrently(
    topic: Topic, messages: Iterable[OutboundMessage], *, limit: int = 256, timeout: float | None = None
) -> None:
    """Publish ``messages`` with up to ``limit`` publishes in flight.

    Returns once all are published. The first failure cancels the publishes still in flight and
    is raised (messages already accepted by the broker stay published).
    """
    if limit < 1:
        raise ValueError(f"limit must be >= 1, got {limit}")
    pending = list(messages)
    if not pending:
        return
    semaphore = asyncio.Semaphore(limit)

    async def one(message: OutboundMessage) -> None:
        async with semaphore:
            await topic.publish(message)

    async def all_of() -> None:
        await run_until_first_error([asyncio.ensure_future(one(m)) for m in pending])

    if timeout is None:
        await all_of()
    else:
        async with asyncio.timeout(timeout):
            await all_of()
