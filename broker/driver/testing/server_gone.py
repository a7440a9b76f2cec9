"""Conformance tests for what an application sees once its broker is gone.

A server started for the test alone (``Harness.own_server``) is SIGKILLed while the application
holds a publisher, consumers and unsettled messages. Every public operation must then return or
raise a :mod:`broker.errors` class within the backend's documented timeouts: never hang, never
leak an SDK exception. Backends whose test server cannot be killed skip these tests.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from contextlib import AsyncExitStack
from typing import Any

import pytest

from broker.backend import Backend
from broker.connect import connect
from broker.driver.testing.harness import Harness, collect, collect_records, need
from broker.errors import BrokerError
from broker.interfaces import MessageIterator
from broker.message import Message, OutboundMessage, Record

__all__ = ["ServerGoneSuite"]


async def _outcome(call: Callable[[], Awaitable[Any]], bound: float) -> str | None:
    """None when ``call`` returned or raised a broker error within ``bound`` seconds; else what it did."""
    started = time.monotonic()
    try:
        async with asyncio.timeout(bound):
            await call()
    except BrokerError:
        return None
    except TimeoutError:
        if time.monotonic() - started >= bound:
            return f"still running after {bound:g}s"
        return "raised a TimeoutError that is not a broker.errors class"
    except Exception as exc:
        return f"raised {type(exc).__module__}.{type(exc).__qualname__}: {exc}"
    return None


async def _until_it_fails(call: Callable[[], Awaitable[Any]]) -> None:
    """Call until it raises: what was buffered before the server died comes first, then an error."""
    for _ in range(100):
        await call()
    raise AssertionError("100 calls returned after the server died")


async def _until_empty(call: Callable[[], Awaitable[list[Message]]]) -> None:
    """Call until it raises or returns no message (a batch pull's timeout is an empty batch)."""
    for _ in range(100):
        if not await call():
            return
    raise AssertionError("100 batch pulls returned messages after the server died")


def _numbered(count: int) -> list[OutboundMessage]:
    return [OutboundMessage(str(i).encode(), key=f"k{i % 3}") for i in range(count)]


#: The prefetch scenario: this many published, the first ``_ACKED`` pulled and acked, then the
#: server dies while the rest sit in the consumer's prefetch buffer (or still in the broker).
_PUBLISHED, _ACKED = 20, 5
#: Each pull's timeout after the death: the outcome does not depend on it (a review saw every one
#: of three ``next_message(timeout=5)`` raise an SDK exception); a short one keeps the test cheap.
_PULL_TIMEOUT = 0.2


async def _pulls_after_the_death(
    consumer: MessageIterator, published: set[bytes], acked: set[bytes], bound: float
) -> dict[str, str]:
    """Pulls on a consumer that had prefetched messages when its server died, until one raises.

    Each pull hands out a message that was published, never acked and not handed out before, or
    raises a broker error, within its timeout plus ``bound``; the pulls go on until one raises
    (at most one more than the unacked messages, so the last can only raise), which drains what
    the client buffered and reaches the pull that meets the dead connection however late the
    client notices the death. Settling the messages handed out now, and closing the consumer,
    return or raise a broker error within ``bound``. Failures by what failed.
    """
    scenario = f"{_ACKED} of {_PUBLISHED} acked, then the server died"
    failures: dict[str, str] = {}
    handed: list[Message] = []
    seen: set[bytes] = set()
    for pull in range(1, len(published - acked) + 2):
        taken: list[Message] = []

        async def take(into: list[Message] = taken) -> None:
            into.append(await consumer.next_message(timeout=_PULL_TIMEOUT))

        outcome = await _outcome(take, _PULL_TIMEOUT + bound)
        if outcome is not None:
            failures[f"next_message #{pull} ({scenario})"] = outcome
            break
        if not taken:
            break  # the pull raised a broker error: what the client buffered is drained
        message = taken[0]
        handed.append(message)
        if message.data not in published or message.data in acked or message.data in seen:
            failures[f"next_message #{pull} ({scenario})"] = (
                f"handed out {message.data!r} after {sorted(acked)} were acked and "
                f"{sorted(seen)} handed out: not published, acked again or handed out twice"
            )
            break
        seen.add(message.data)
    else:
        failures[f"next_message ({scenario})"] = "every pull handed out a message: none raised"
    acks = await asyncio.gather(*(_outcome(m.ack, bound) for m in handed))
    for message, outcome in zip(handed, acks, strict=True):
        if outcome is not None:
            failures[f"ack of {message.data!r}, handed out after the server died"] = outcome
    outcome = await _outcome(consumer.close, bound)  # while the other operations run: cheaper
    if outcome is not None:
        failures[f"close ({scenario})"] = outcome
    return failures


class ServerGoneSuite:
    """Every public operation after the server was SIGKILLed: a typed error or a return, in time."""

    async def test_every_operation_after_the_server_died(self, harness: Harness) -> None:
        """Publish, pull, settle, commit and close after a SIGKILL: each returns or raises a typed
        error within ``Harness.dead_server_bound`` (pulls first hand out what was buffered, where
        it can still be handed out). A consumer that had 5 of 20 messages acked and the rest
        prefetched is pulled until a pull raises (:func:`_pulls_after_the_death`)."""
        need(harness, "messages")
        if harness.own_server is None:
            pytest.skip("the harness cannot start a server of its own to kill")
        bound = harness.dead_server_bound
        topic, sub, batch_sub = harness.name("gone"), harness.name("sub"), harness.name("sub")
        prefetched_topic, prefetched_sub = harness.name("prefetched"), harness.name("sub")
        failures: dict[str, str] = {}
        pending: asyncio.Future[None] | None = None
        with harness.own_server() as server:
            backend: Backend = connect(server.url)
            try:
                async with AsyncExitStack() as stack:
                    consumer = await stack.enter_async_context(backend.messages(topic, sub))
                    batched = await stack.enter_async_context(
                        backend.batched_messages(topic, batch_sub, batch_size=5, batch_timeout=0.2)
                    )
                    prefetching = await stack.enter_async_context(
                        backend.messages(prefetched_topic, prefetched_sub)
                    )
                    records = None
                    if harness.capabilities.records:
                        records = await stack.enter_async_context(backend.records(topic, harness.name("g")))
                    publishing = backend.publisher()
                    publisher = publishing.topic(topic)
                    await publisher.batch_publish(*_numbered(10))
                    await publishing.topic(prefetched_topic).batch_publish(*_numbered(_PUBLISHED))
                    acked = {m.data for m in await collect(prefetching, _ACKED, harness.patience)}
                    held = await collect(consumer, 4, harness.patience, ack=False)
                    async with asyncio.timeout(harness.patience):
                        taken: list[Message] = []
                        while not taken:
                            taken = await batched.next_batch(timeout=1.0)
                    record: Record | None = None
                    if records is not None:
                        (record,) = await collect_records(records, 1, harness.patience)

                    server.kill()
                    # A publish with no timeout of its own: the backend's close must end it with a
                    # typed error (flushed, or failed), never leave it waiting.
                    pending = asyncio.ensure_future(publisher.publish(OutboundMessage(b"pending")))

                    operations: dict[str, Callable[[], Awaitable[Any]]] = {
                        "publish": lambda: publisher.publish(OutboundMessage(b"after"), timeout=bound / 2),
                        "batch_publish": lambda: publisher.batch_publish(*_numbered(3), timeout=bound / 2),
                        "next_message": lambda: _until_it_fails(lambda: consumer.next_message(timeout=1.0)),
                        "next_batch": lambda: _until_empty(lambda: batched.next_batch(timeout=1.0)),
                        "ack": held[0].ack,
                        "nack": held[1].nack,
                        "in_progress": held[2].in_progress,
                        "dead_letter": held[3].dead_letter,
                        "ack of a batch's message": taken[0].ack,
                    }
                    if records is not None and record is not None:
                        operations["commit"] = record.ack
                        operations["next_record"] = lambda: _until_it_fails(
                            lambda: records.next_record(timeout=1.0)
                        )
                    names = list(operations)
                    published = {m.data for m in _numbered(_PUBLISHED)}
                    pulls = asyncio.ensure_future(
                        _pulls_after_the_death(prefetching, published, acked, bound)
                    )
                    results = await asyncio.gather(*(_outcome(operations[n], bound) for n in names))
                    failures.update((n, r) for n, r in zip(names, results, strict=True) if r is not None)
                    failures.update(await pulls)
                    closes = [
                        ("close the message consumer", consumer.close),
                        ("close batched", batched.close),
                    ]
                    if records is not None:
                        closes.append(("close the record consumer", records.close))
                    for name, close in closes:
                        outcome = await _outcome(close, bound)
                        if outcome is not None:
                            failures[name] = outcome
            finally:
                outcome = await _outcome(backend.close, bound)
                if outcome is not None:
                    failures["close the backend"] = outcome
                if pending is not None:
                    outcome = await _outcome(lambda: pending, bound)
                    if outcome is not None:
                        failures["a publish pending when the backend closed"] = outcome
        assert not failures, "after the server died:\n" + "\n".join(
            f"  {n}: {r}" for n, r in failures.items()
        )
