"""Conformance tests of the backlog extra (:class:`broker.backend.Backlog`), to mix into the suite.

Where the broker reports a backlog, publishing N messages to a subscription shows a backlog of
N, and consuming and acking k of them brings it to N - k within the harness's patience. Where
the backend answers None (its broker does not say) the tests are skipped with that reason. On
backends whose backlog leaves out messages in flight (``backlog_counts_in_flight`` False: the
Kafka marker queue counts what no consumer fetched yet, RabbitMQ the ready messages), the
``messages()`` test checks that the backlog falls to N - k or below while the consumer holds
the rest; ``records()`` backlogs follow commits everywhere and are checked exactly.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker.driver.testing.harness import Harness, need
from broker.errors import UnknownTopic
from broker.message import OutboundMessage

__all__ = ["BacklogSuite"]

#: Messages published by each test, and how many of them are consumed and acked.
_PUBLISHED = 10
_ACKED = 4


async def _backlog(harness: Harness, topic: str, subscription: str) -> int | None:
    ask = getattr(harness.backend, "backlog", None)
    if ask is None:
        pytest.skip(f"backend {harness.backend.name!r} has no backlog() extra")
    value: int | None = await ask(topic, subscription)
    return value


async def _reaches(
    harness: Harness, topic: str, subscription: str, wanted: Callable[[int], bool], what: str
) -> int:
    """Poll the backlog until ``wanted(backlog)``; fails after the harness's patience."""
    seen: list[int | None] = []
    try:
        async with asyncio.timeout(harness.patience):
            while True:
                try:
                    value = await _backlog(harness, topic, subscription)
                except UnknownTopic:  # a group or consumer some brokers make a moment later
                    value = None
                seen.append(value)
                if value is not None and wanted(value):
                    return value
                await asyncio.sleep(0.2)
    except TimeoutError:
        pytest.fail(f"the backlog of {topic}/{subscription} never became {what}; last seen {seen[-5:]}")


def _skip_silent(harness: Harness) -> None:
    pytest.skip(f"the {harness.backend.name} broker does not report a backlog (backlog() is None)")


async def _publish(harness: Harness, topic: str, count: int) -> None:
    """``count`` messages, one publish each: one record per batch, so a broker whose high watermark
    is off for multi-record batches (Tansu 0.6: the last batch's base offset + 1) reports the true one.
    """
    target = harness.backend.publisher().topic(topic)
    for i in range(count):
        await target.publish(OutboundMessage(str(i).encode(), key=f"k{i % 3}"))


class BacklogSuite:
    """``backend.backlog(topic, subscription)`` against the broker's own figures."""

    async def test_backlog_of_a_subscription_follows_acks(self, harness: Harness) -> None:
        """N published shows N; k consumed and acked bring it to N - k."""
        need(harness, "messages")
        topic, sub = harness.name("topic"), harness.name("sub")
        await harness.prepare(topic, [sub])
        # The subscription exists once a consumer of it was entered and pulled once (nothing yet).
        async with harness.messages(topic, sub) as consumer:
            with contextlib.suppress(TimeoutError):
                await consumer.next_message(timeout=0.5)
        first = await _backlog(harness, topic, sub)
        if first is None:
            _skip_silent(harness)
        assert first == 0, f"a new subscription with nothing published has a backlog of {first}"
        await _publish(harness, topic, _PUBLISHED)
        await _reaches(harness, topic, sub, lambda v: v == _PUBLISHED, str(_PUBLISHED))
        counts_in_flight = getattr(harness.backend, "backlog_counts_in_flight", True)
        async with harness.messages(topic, sub) as consumer:
            async with asyncio.timeout(harness.patience):
                for _ in range(_ACKED):
                    message = await consumer.next_message()
                    await message.ack()
            rest = _PUBLISHED - _ACKED
            if counts_in_flight:
                await _reaches(harness, topic, sub, lambda v: v == rest, str(rest))
            else:  # what the consumer fetched and holds unacked is not counted
                await _reaches(harness, topic, sub, lambda v: 0 <= v <= rest, f"at most {rest}")

    async def test_backlog_of_a_group_follows_commits(self, harness: Harness) -> None:
        """``records()``: N published shows N once the group exists; k acked bring it to N - k."""
        need(harness, "records")
        topic, group = harness.name("log"), harness.name("group")
        await harness.prepare(topic, [])
        await _publish(harness, topic, _PUBLISHED)
        async with harness.records(topic, group) as records:
            taken = [await records.next_record(timeout=harness.patience)]
            with contextlib.suppress(UnknownTopic):  # some brokers make the group a moment later
                if await _backlog(harness, topic, group) is None:
                    _skip_silent(harness)
            await _reaches(harness, topic, group, lambda v: v == _PUBLISHED, str(_PUBLISHED))
            async with asyncio.timeout(harness.patience):
                while len(taken) < _ACKED:
                    taken.append(await records.next_record())
            for record in taken:
                await record.ack()
            rest = _PUBLISHED - _ACKED
            await _reaches(harness, topic, group, lambda v: v == rest, str(rest))

    async def test_instrumented_consumer_reports_its_backlog(self, harness: Harness) -> None:
        """Through ``instrument(...)``, an open consumer's health carries the backlog and ``lagging``."""
        need(harness, "messages")
        from broker.telemetry import instrument

        topic, sub = harness.name("topic"), harness.name("sub")
        await harness.prepare(topic, [sub])
        # A view of the harness's backend (closed by the harness): not closed here.
        backend = instrument(harness.backend, opentelemetry=False)
        backend.backlog_interval = 0.2
        backend.lag_threshold = -1  # any figure the broker reports is "above": lagging
        async with backend.messages(topic, sub) as consumer:
            with contextlib.suppress(TimeoutError):
                await consumer.next_message(timeout=0.5)
            if await backend.backlog(topic, sub) is None:
                _skip_silent(harness)
            await _publish(harness, topic, _PUBLISHED)
            message = await consumer.next_message(timeout=harness.patience)
            try:
                async with asyncio.timeout(harness.patience):
                    while not backend.health().consumers[0].lagging:  # noqa: ASYNC110 - polled state
                        await asyncio.sleep(0.05)
            except TimeoutError:
                pytest.fail(f"never lagging: {backend.health().consumers[0]}")
            entry = backend.health().consumers[0]
            assert entry.backlog is not None and 0 <= entry.backlog <= _PUBLISHED
            assert backend.health().lagging and backend.health().ready
            await message.ack()
