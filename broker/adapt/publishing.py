"""Publishing helpers for backends with no native batch publish."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

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
        tasks = [asyncio.ensure_future(one(m)) for m in pending]
        try:
            done, _ = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
            for task in done:
                if not task.cancelled() and task.exception() is not None:
                    raise task.exception()  # type: ignore[misc]
            await asyncio.gather(*tasks)
        finally:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)

    if timeout is None:
        await all_of()
    else:
        async with asyncio.timeout(timeout):
            await all_of()
