"""Settle many messages or records at once, using a backend's bulk path where it has one."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Collection, Coroutine, Iterable, Sequence
from typing import Any

from broker.message import Message, Record, RecordBatch, acks_in_bulk, claim_ack, release_claim

__all__ = ["ack_all", "ack_in_turn", "commit_highest_offsets", "nack_all"]


async def ack_all(messages: Sequence[Message]) -> None:
    """Ack every unsettled message, one bulk call per backend where it supports bulk acks.

    A :class:`~broker.message.BulkAcker` offers ``ack_many(messages) -> others``: it acks the
    pending messages that are its own and returns the rest.
    """
    remaining: Sequence[Message] = messages
    calls: list[Coroutine[Any, Any, None]] = []
    while remaining:
        acker = remaining[0].acker
        if not acks_in_bulk(acker):
            calls.extend(m.ack() for m in remaining if m.acker is acker and not m.settled)
            remaining = [m for m in remaining if m.acker is not acker]
        else:
            others = await acker.ack_many(remaining)
            if len(others) >= len(remaining):  # the acker claimed none of them: settle one by one
                calls.extend(m.ack() for m in remaining if m.acker is acker and not m.settled)
                others = [m for m in remaining if m.acker is not acker]
            remaining = others
    if calls:
        await asyncio.gather(*calls)


async def ack_in_turn(
    messages: Iterable[Message], acker: object, send: Callable[[Message], Awaitable[None] | None]
) -> list[Message]:
    """The ``ack_many`` of a bulk acker whose broker settles one message per call.

    Each pending message of ``acker`` among ``messages`` is marked acked and sent with
    ``send(message)`` (awaited when it returns an awaitable: an SDK that acknowledges
    synchronously costs no coroutine per message), one after the other; the messages of other
    ackers are returned, in order. A failed send leaves its message (and the later ones, not
    claimed yet) pending and is raised.
    """
    others: list[Message] = []
    for message in messages:
        if message.acker is not acker:
            others.append(message)
        elif claim_ack(message):
            try:
                sent = send(message)
                if sent is not None:
                    await sent
            except BaseException:
                release_claim(message)
                raise
    return others


async def nack_all(messages: Sequence[Message], delay: float | None = None) -> None:
    """Nack every unsettled message; every nack is tried, then the first failure is raised."""
    results = await asyncio.gather(
        *(m.nack(delay) for m in messages if not m.settled), return_exceptions=True
    )
    for result in results:
        if isinstance(result, BaseException):
            raise result


async def commit_highest_offsets(records: Iterable[Record]) -> None:
    """Commit, per partition, the highest offset among ``records`` (one commit per partition)."""
    if isinstance(records, RecordBatch):
        known = records.highest()
        if known is not None:  # the backend knows them from the read
            await _ack_each(known.values())
            return
    highest: dict[tuple[str, int], Record] = {}
    run: tuple[str, int] = ("", -1)
    best: Record | None = None
    for record in records:  # batches come in runs of one partition: one dict access per run
        topic, partition = record.topic, record.partition
        if partition != run[1] or topic != run[0]:
            if best is not None:
                highest[run] = best
            run = (topic, partition)
            best = highest.get(run)
        if best is None or record.offset > best.offset:
            best = record
    if best is not None:
        highest[run] = best
    await _ack_each(highest.values())


async def _ack_each(records: Collection[Record]) -> None:
    if len(records) == 1:  # the common case (one partition): no task per ack
        for record in records:
            await record.ack()
    elif records:
        await asyncio.gather(*(r.ack() for r in records))
