"""The application layer's conformance subset: :class:`broker.App` on every backend.

Subclass :class:`AppConformanceSuite` next to a backend's conformance tests and provide the same
``harness`` fixture (a :class:`~broker.driver.testing.Harness` with a ``url``): the app connects
with ``harness.url`` itself, as an application would. Each test counts messages: decoded and acked
on return (never redelivered), the return value published to the output topic, an undecodable
payload dead-lettered, the WARNING for a manual handler that returns without settling, a failure
retried until it succeeds, a lifespan left while handlers run drains them with nothing lost, a
handler slower than the ack deadline handles its message once (the lease is kept), and records of
a log handled in partition order with nothing lost across a restart.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
from collections import Counter

import pytest

from broker.app import App
from broker.backoff import Backoff
from broker.driver.testing.harness import Harness, need, subscribed_topic
from broker.message import Message, OutboundMessage, Record
from broker.retry import ATTR_REASON, DeadLetterTopic, RetryPolicy
from broker.testing.waiting import collect, wait_until

__all__ = ["AppConformanceSuite", "Item"]


@dataclasses.dataclass(frozen=True)
class Item:
    """The payload the suite publishes (JSON) and its subscribers take."""

    id: int
    name: str


def _app(harness: Harness) -> App:
    if harness.url is None:
        pytest.skip("the harness names no url for the app to connect with")
    return App(harness.url)


def _payload(number: int) -> OutboundMessage:
    return OutboundMessage(json.dumps({"id": number, "name": f"item-{number}"}).encode())


async def _subscribed(harness: Harness, prefix: str, ack_deadline: float | None = None) -> tuple[str, str]:
    """A new topic and a subscription of it that exists already (with ``ack_deadline`` when given)."""
    if ack_deadline is None:
        return await subscribed_topic(harness, prefix)
    topic, sub = harness.name(prefix), harness.name("sub")
    await harness.prepare(topic, [sub])
    async with harness.messages(topic, sub, ack_deadline=ack_deadline):
        pass
    return topic, sub


class AppConformanceSuite:
    """``broker.App`` over one backend: decode and auto-ack, retry then success, drain on exit, leases."""

    async def test_app_decodes_and_acks_on_return_never_redelivered(self, harness: Harness) -> None:
        """Five JSON payloads reach a dataclass handler once each, and each is acked on return."""
        deadline = harness.short_ack_deadline
        topic, sub = await _subscribed(harness, "app-ack", deadline)
        app = _app(harness)
        got: list[Item] = []
        delivered: list[Message] = []

        @app.subscriber(topic, sub, ack_deadline=deadline)
        async def handle(item: Item, message: Message) -> None:
            got.append(item)
            delivered.append(message)

        async with app.lifespan(drain_timeout=harness.patience) as running:
            await running.publisher().topic(topic).batch_publish(*(_payload(i) for i in range(5)))
            await wait_until(lambda: len(got) >= 5, harness.patience)
            # past the ack deadline (bounded: the state check below covers the slow deadlines)
            await asyncio.sleep(min(deadline * 1.5, 3.0))
        assert sorted(i.id for i in got) == list(range(5)), "each message decoded once, none redelivered"
        assert got[0] == Item(got[0].id, f"item-{got[0].id}")
        assert [m.state for m in delivered] == ["acked"] * 5

    async def test_app_publishes_the_return_value_to_its_output(self, harness: Harness) -> None:
        """A subscriber's return value reaches its output topic, typed, with the key of its input."""
        topic, sub = await _subscribed(harness, "app-in")
        out, out_sub = harness.name("app-out"), harness.name("sub")
        await harness.prepare(out, [out_sub])
        app = _app(harness)

        @app.subscriber(topic, sub, publish_to=out)
        async def rename(item: Item) -> Item:
            return Item(item.id, item.name.upper())

        async with harness.messages(out, out_sub) as outputs:
            async with app.lifespan(drain_timeout=harness.patience) as running:
                await running.publisher().topic(topic).publish(OutboundMessage(_payload(4).data, key="k4"))
                got = await collect(outputs, 1, harness.patience)
            await got[0].ack()
        assert json.loads(got[0].data) == {"id": 4, "name": "ITEM-4"}
        assert got[0].key == "k4"

    async def test_app_dead_letters_an_undecodable_payload(self, harness: Harness) -> None:
        """A payload that does not decode never reaches the handler: it goes to the policy's
        dead-letter topic with its reason, and the next message is handled."""
        topic, sub = await _subscribed(harness, "app-poison")
        dead, dead_sub = harness.name("app-dead"), harness.name("sub")
        await harness.prepare(dead, [dead_sub])
        app = _app(harness)
        got: list[Item] = []

        @app.subscriber(topic, sub, retry=RetryPolicy(dead_letter=DeadLetterTopic(dead)))
        async def handle(item: Item) -> None:
            got.append(item)

        async with harness.messages(dead, dead_sub) as letters:
            async with app.lifespan(drain_timeout=harness.patience) as running:
                handle_ = running.publisher().topic(topic)
                await handle_.publish(OutboundMessage(b"not json"))
                await handle_.publish(_payload(8))
                letter = (await collect(letters, 1, harness.patience))[0]
                await wait_until(lambda: len(got) == 1, harness.patience)
            await letter.ack()
        assert letter.data == b"not json"
        assert letter.attributes[ATTR_REASON] == "non-retryable DecodeError"
        assert [i.id for i in got] == [8]

    async def test_app_warns_when_a_manual_handler_returns_without_settling(
        self, harness: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        """``ack="manual"``: a handler returning without settling gets the WARNING naming it."""
        topic, sub = await _subscribed(harness, "app-manual")
        app = _app(harness)
        seen: list[Message] = []

        @app.subscriber(topic, sub, ack="manual")
        async def forgetful(item: Item, message: Message) -> None:
            seen.append(message)

        with caplog.at_level(logging.WARNING, logger="broker.settle"):
            async with app.lifespan(drain_timeout=harness.patience) as running:
                await running.publisher().topic(topic).publish(_payload(5))
                await wait_until(
                    lambda: any("forgetful" in r.getMessage() for r in caplog.records), harness.patience
                )
                for message in seen:
                    await message.ack()
        warned = [r.getMessage() for r in caplog.records if "forgetful" in r.getMessage()]
        assert warned and seen[0].id in warned[0]

    async def test_app_retries_a_failed_handler_until_it_succeeds(self, harness: Harness) -> None:
        """A handler failing each message's first attempt gets it again (the policy's nack) and succeeds."""
        need(harness, "nack_redelivers")
        topic, sub = await _subscribed(harness, "app-retry")
        app = _app(harness)
        attempts: Counter[int] = Counter()
        done: set[int] = set()
        policy = RetryPolicy(backoff=Backoff(initial=0.1, maximum=0.2), dead_letter=None)

        @app.subscriber(topic, sub, retry=policy)
        async def flaky(item: Item) -> None:
            attempts[item.id] += 1
            if attempts[item.id] == 1:
                raise RuntimeError(f"first attempt at {item.id} fails")
            done.add(item.id)

        async with app.lifespan(drain_timeout=harness.patience) as running:
            await running.publisher().topic(topic).batch_publish(*(_payload(i) for i in range(3)))
            await wait_until(lambda: len(done) == 3, harness.patience * 2)
        assert done == {0, 1, 2}
        assert all(attempts[i] >= 2 for i in range(3)), attempts

    async def test_app_lifespan_exit_drains_with_nothing_lost(self, harness: Harness) -> None:
        """Leaving the lifespan lets running handlers finish; the next run gets every message left."""
        need(harness, "nack_redelivers")
        topic, sub = await _subscribed(harness, "app-drain")
        app = _app(harness)
        started: list[int] = []
        finished: list[int] = []

        @app.subscriber(topic, sub, concurrency=2)
        async def slow(item: Item) -> None:
            started.append(item.id)
            await asyncio.sleep(0.2)
            finished.append(item.id)

        count = 10
        async with app.lifespan(drain_timeout=harness.patience) as running:
            await running.publisher().topic(topic).batch_publish(*(_payload(i) for i in range(count)))
            await wait_until(lambda: len(started) >= 2, harness.patience)
        assert sorted(started) == sorted(finished), "every handler running at the exit finished"
        assert len(finished) < count, "the exit stopped the app before the end"
        async with app.lifespan(drain_timeout=harness.patience):
            await wait_until(lambda: set(finished) == set(range(count)), harness.patience * 3)
        assert set(finished) == set(range(count))

    async def test_app_keeps_the_lease_while_a_slow_handler_runs(self, harness: Harness) -> None:
        """A handler taking 2.5 ack deadlines gets its message once (the app renews the deadline) and
        acks it in time."""
        need(harness, "in_progress")
        deadline = harness.short_ack_deadline
        if deadline > 2.0:
            pytest.skip(
                f"the shortest ack deadline here is {deadline}s: the test would take {2.5 * deadline}s"
            )
        topic, sub = await _subscribed(harness, "app-lease", deadline)
        app = _app(harness)
        calls: list[int] = []
        delivered: list[Message] = []

        @app.subscriber(topic, sub, concurrency=2, ack_deadline=deadline)
        async def slow(item: Item, message: Message) -> None:
            calls.append(item.id)
            delivered.append(message)
            await asyncio.sleep(2.5 * deadline)

        async with app.lifespan(drain_timeout=harness.patience) as running:
            await running.publisher().topic(topic).publish(_payload(1))
            await wait_until(
                lambda: bool(delivered) and delivered[0].settled, harness.patience + 3 * deadline
            )
            await asyncio.sleep(deadline * 1.5)  # a redelivery would come by now
        assert calls == [1], "handled once: the deadline was extended while the handler ran"
        assert delivered[0].state == "acked"

    async def test_app_records_run_in_partition_order_and_a_restart_loses_nothing(
        self, harness: Harness
    ) -> None:
        """``@app.records``: each partition's records in offset order; an app stopped half way and
        started again in the same group handles every record (committed below what was unfinished)."""
        need(harness, "records")
        topic, group = harness.name("app-log"), harness.name("group")
        await harness.prepare(topic, [])
        count = 30
        await (
            harness.backend.publisher()
            .topic(topic)
            .batch_publish(
                *(
                    OutboundMessage(json.dumps({"id": i, "name": f"k{i % 5}"}).encode(), key=f"k{i % 5}")
                    for i in range(count)
                )
            )
        )
        app = _app(harness)
        runs: list[list[tuple[int, int, int]]] = [[], []]
        stopping = asyncio.Event()

        @app.records(topic, group, max_in_flight=4)
        async def handle(item: Item, record: Record) -> None:
            runs[1 if stopping.is_set() else 0].append((record.partition, record.offset, item.id))
            await asyncio.sleep(0.01)

        async with app.lifespan(drain_timeout=harness.patience):
            await wait_until(lambda: len(runs[0]) >= count // 2, harness.patience)
        stopping.set()
        async with app.lifespan(drain_timeout=harness.patience):
            await wait_until(
                lambda: {i for run in runs for _, _, i in run} == set(range(count)), harness.patience
            )
        for run in runs:
            for partition in {p for p, _, _ in run}:
                offsets = [o for p, o, _ in run if p == partition]
                assert offsets == sorted(offsets), f"partition {partition} out of order: {offsets}"
        assert {i for run in runs for _, _, i in run} == set(range(count)), "records were lost"
        # the restart re-read at most what was read past the last commit of each partition
        assert len(runs[0]) + len(runs[1]) - count <= 4 * max(1, len({p for p, _, _ in runs[0]}))
