"""Pieces the adapters share: pull functions, settling leftovers, logging."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Iterable
from typing import Any, TypeVar

from broker.message import Message

T = TypeVar("T")

#: A pull: wait up to ``timeout`` seconds (None: forever) for the next item; raise TimeoutError.
Pull = Callable[[float | None], Awaitable[T]]

log = logging.getLogger("broker.adapt")


def messages_in(items: Iterable[Any]) -> list[Message]:
    """The unsettled Messages among ``items`` (items may be Messages, Records, or lists of them)."""
    out: list[Message] = []
    for item in items:
        if isinstance(item, Message):
            if not item.settled:
                out.append(item)
        elif isinstance(item, list):
            out.extend(m for m in item if isinstance(m, Message) and not m.settled)
    return out


async def nack_leftovers(items: Iterable[Any], delay: float | None = None) -> None:
    """Nack every unsettled Message in ``items``; never raises (failures are logged).

    Records need nothing: an uncommitted offset is read again by the next consumer.
    """
    leftovers = messages_in(items)
    if not leftovers:
        return
    results = await asyncio.gather(*(m.nack(delay) for m in leftovers), return_exceptions=True)
    for message, result in zip(leftovers, results, strict=True):
        if isinstance(result, BaseException):
            log.warning("could not nack message %s on shutdown: %r", message.id, result)
