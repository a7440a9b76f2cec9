"""Conformance tests for the orders in which applications open, close, reopen and crash.

Every test here goes through the backend's public API only: no topic or subscription is made
ready beforehand (no ``Harness.prepare``), options are the portable names of
:mod:`broker.driver.options`. The rule they prove: once ``async with backend.messages(...)`` has been
entered, every message published afterwards is delivered to that subscription, also after it
was closed and opened again, and a consumer that dies loses nothing.

The open/publish/reopen orders hold through every wrapper an application puts around the
backend's consumer too (:func:`consumer_wrappers`: ``broker.typed``, ``broker.schemas``,
CloudEvents, ``broker.telemetry``): entering a wrapper enters what it wraps, so the
subscription exists from the same moment. The tests of entering, and of leaving then entering again,
run their order through all of them at once, on topics of their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import sys
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import pytest

from broker.driver.clock import clock
from broker.driver.options import PORTABLE_OPTIONS
from broker.driver.testing.harness import Harness, collect, drain, need
from broker.errors import (
    AckError,
    ClosedError,
    ConfigError,
    MissingDependency,
    NotSupported,
    UnknownSetting,
)
from broker.interfaces import MessageIterator
from broker.message import Message, OutboundMessage, Record

__all__ = ["LifecycleSuite", "consumer_wrappers"]

#: How many of a killed consumer's last acks may still have been on their way to the broker.
_ACKS_IN_FLIGHT = 10


@contextlib.asynccontextmanager
async def _failing(seconds: float, what: Callable[[], str]) -> AsyncIterator[None]:
    """``asyncio.timeout(seconds)`` whose expiry fails the test saying ``what()`` stood unfinished."""
    try:
        async with asyncio.timeout(seconds):
            yield
    except TimeoutError:
        raise AssertionError(f"{what()}: not done within {seconds} s") from None


def _numbered(start: int, count: int, key: str | None = None) -> list[OutboundMessage]:
    return [OutboundMessage(str(i).encode(), key=key) for i in range(start, start + count)]


def _values(messages: list[Message]) -> Counter[int]:
    return Counter(int(m.data) for m in messages)


#: ``open(topic, subscription)``: a message consumer, to be entered with ``async with``.
OpenConsumer = Callable[[str, str], MessageIterator]


def consumer_wrappers(harness: Harness) -> dict[str, OpenConsumer]:
    """How an application opens a message consumer: the backend's own, and each wrapper around it.

    ``plain``: ``backend.messages``; ``typed``: ``typed.messages(..., int)``; ``cloudevents``:
    ``typed.messages`` with a CloudEvents binding; ``schemas``: ``schemas.messages`` with a JSON
    Schema binding on confluent-kafka's in-memory registry; ``telemetry``: the ``messages`` of
    ``telemetry.instrument(backend)``. A wrapper whose extra is not installed is left out.
    """
    from broker import typed
    from broker.typed import cloudevents

    backend = harness.backend
    opens: dict[str, OpenConsumer] = {
        "plain": backend.messages,
        "typed": lambda topic, sub: typed.messages(backend.messages(topic, sub), int),
        "cloudevents": lambda topic, sub: typed.messages(
            backend.messages(topic, sub), cloudevents.binding(int, protocol=backend)
        ),
    }
    try:
        from broker import schemas

        registry = schemas.Registry(f"mock://{harness.name('registry')}")
        numbers = schemas.json_schema(registry, json.dumps({"title": "Number", "type": "integer"}))
        opens["schemas"] = lambda topic, sub: schemas.messages(backend.messages(topic, sub), numbers)
    except MissingDependency:
        pass
    from broker import telemetry

    instrumented = telemetry.instrument(backend, opentelemetry=False, backlog_interval=None)
    opens["telemetry"] = instrumented.messages
    return opens


async def through_every_wrapper(
    harness: Harness, order: Callable[[str, OpenConsumer], Awaitable[None]]
) -> None:
    """Run ``order(kind, open)`` for every :func:`consumer_wrappers` entry at once; fail naming
    each kind that failed."""
    opens = consumer_wrappers(harness)
    results = await asyncio.gather(
        *(order(kind, open_) for kind, open_ in opens.items()), return_exceptions=True
    )
    failed = {
        kind: result for kind, result in zip(opens, results, strict=True) if isinstance(result, BaseException)
    }
    if failed:
        report = "; ".join(f"{kind}: {type(exc).__name__}: {exc}" for kind, exc in failed.items())
        raise AssertionError(f"failed through {sorted(failed)}: {report}") from next(iter(failed.values()))


async def _collect_all(
    consumer: MessageIterator, count: int, patience: float, *, quiet: float = 0.5
) -> list[Message]:
    """Ack ``count`` messages (or what came within ``patience`` seconds), then what follows within
    ``quiet`` seconds: a loss shows as the values missing, not as a timeout."""
    got: list[Message] = []
    try:
        async with asyncio.timeout(patience):
            while len(got) < count:
                message = await consumer.next_message()
                await message.ack()
                got.append(message)
    except TimeoutError:
        quiet = 0
    return got + (await drain(consumer, quiet) if quiet else [])


class LifecycleSuite:
    """Open/close/reopen orders, failing handlers, busy close, crashed consumers, portable options."""

    async def test_consumer_opened_before_its_topic_exists(self, harness: Harness) -> None:
        need(harness, "messages")
        count = 20

        async def order(kind: str, open_consumer: OpenConsumer) -> None:
            topic, sub = harness.name("fresh"), harness.name("sub")
            async with open_consumer(topic, sub) as consumer:
                await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, count))
                got = await _collect_all(consumer, count, harness.patience)
            values = _values(got)
            assert set(values) == set(range(count)), f"lost: {sorted(set(range(count)) - set(values))}"
            assert max(values.values()) == 1, "delivered twice"

        await through_every_wrapper(harness, order)

    async def test_nack_redelivers_on_a_topic_created_after_the_consumer(self, harness: Harness) -> None:
        need(harness, "messages", "nack_redelivers")
        topic, sub = harness.name("fresh"), harness.name("sub")
        count = 30
        nacked: set[int] = set()
        acked: list[int] = []
        async with harness.backend.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, count))
            async with asyncio.timeout(harness.patience * 2):
                while len(set(acked)) < count:
                    message = await consumer.next_message()
                    value = int(message.data)
                    if value % 5 == 0 and value not in nacked:
                        nacked.add(value)
                        await message.nack()
                    else:
                        await message.ack()
                        acked.append(value)
        assert sorted(set(acked)) == list(range(count))
        assert nacked == set(range(0, count, 5))

    async def test_open_close_publish_reopen(self, harness: Harness) -> None:
        need(harness, "messages")

        async def order(kind: str, open_consumer: OpenConsumer) -> None:
            topic, sub = harness.name("reopen"), harness.name("sub")
            publisher = harness.backend.publisher().topic(topic)
            async with open_consumer(topic, sub):
                pass  # opened on a topic that does not exist yet, closed with nothing delivered
            await publisher.batch_publish(*_numbered(0, 10))
            async with open_consumer(topic, sub) as consumer:
                first = await _collect_all(consumer, 10, harness.patience, quiet=0)
            await publisher.batch_publish(*_numbered(10, 10))
            async with open_consumer(topic, sub) as consumer:
                second = await _collect_all(consumer, 10, harness.patience)
            values = _values(first + second)
            assert set(values) == set(range(20)), f"lost: {sorted(set(range(20)) - set(values))}"
            assert max(values.values()) == 1, "an acked message came back after reopening"

        await through_every_wrapper(harness, order)

    async def test_publish_before_any_subscription(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, sub = harness.name("early"), harness.name("sub")
        publisher = harness.backend.publisher().topic(topic)
        await publisher.batch_publish(*_numbered(0, 5))  # nobody subscribed yet: must not fail
        async with harness.backend.messages(topic, sub) as consumer:
            await publisher.batch_publish(*_numbered(5, 5))
            backlog = harness.capabilities.backlog_for_new_subscriptions
            got = await collect(consumer, 10 if backlog else 5, harness.patience)
            got += await drain(consumer, 0.5)
        values = _values(got)
        assert set(range(5, 10)) <= set(values), "a message published after subscribing was lost"
        if backlog:
            assert set(values) == set(range(10)), "backlog_for_new_subscriptions, but the backlog was lost"
        assert max(values.values()) == 1

    async def test_receiver_with_a_handler_that_always_fails(self, harness: Harness) -> None:
        need(harness, "messages", "nack_redelivers")
        topic, sub = harness.name("poison"), harness.name("sub")
        async with harness.backend.messages(topic, sub):
            pass  # the subscription exists from here on
        count = 10
        calls: Counter[int] = Counter()

        async def handler(message: Message) -> None:
            calls[int(message.data)] += 1
            raise RuntimeError("always fails")

        receiver = harness.backend.receiver(topic, sub, concurrency=2)
        started = clock.monotonic()
        task = asyncio.ensure_future(receiver.receive(handler))
        try:
            await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, count))
            async with asyncio.timeout(harness.patience * 3):
                while len(calls) < count or min(calls.values()) < 2:  # noqa: ASYNC110 - counting calls
                    await asyncio.sleep(0.05)
        except TimeoutError:
            pytest.fail(f"redeliveries starved other messages: handler calls per message {dict(calls)}")
        finally:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
        elapsed = clock.monotonic() - started
        total = sum(calls.values())
        # A receiver must not spin: failed messages come back with a backoff, not at once.
        assert total <= count * (elapsed / 0.1 + 5), f"{total} handler calls in {elapsed:.1f}s: no backoff"

    async def test_backend_close_while_consumers_are_busy(self, harness: Harness) -> None:
        need(harness, "messages", "ack_deadline")
        deadline = harness.short_ack_deadline
        topic, sub = harness.name("busy"), harness.name("sub")
        count = 40
        handled: list[int] = []
        tried: set[int] = set()  # acks sent; one that raised during the close may still have landed
        other = harness.connect()
        try:
            async with asyncio.timeout(harness.patience):
                async with other.messages(topic, sub, ack_deadline=deadline):
                    pass
        except TimeoutError:
            raise AssertionError(f"making the subscription took over {harness.patience} s") from None
        consumer = other.messages(topic, sub, ack_deadline=deadline)
        holder = other.messages(topic, sub, ack_deadline=deadline)

        async def handler(message: Message) -> None:
            await asyncio.sleep(0.02)
            tried.add(int(message.data))
            await message.ack()
            handled.append(int(message.data))

        from broker import adapt

        task = asyncio.ensure_future(adapt.receiver(consumer, concurrency=4).receive(handler))
        await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, count))
        held: Message | None = None
        seen, progress_at = 0, clock.monotonic()
        async with _failing(harness.patience * 2, lambda: f"the receiver handled {len(handled)} of 10"):
            while len(handled) < 10:
                if len(handled) != seen:
                    seen, progress_at = len(handled), clock.monotonic()
                if held is None:
                    try:
                        held = await holder.next_message(timeout=0.05)  # taken, never settled
                    except TimeoutError:
                        pass
                elif clock.monotonic() - progress_at > deadline * 2:
                    # On a partitioned log the holder may own every partition of the topic: the
                    # receiver then waits in its fetch, which is busy enough for this test.
                    break
                else:
                    await asyncio.sleep(0.05)
        async with _failing(harness.patience, lambda: f"the close (receiver done: {task.done()})"):
            await other.close()  # must neither hang nor raise while both consumers are busy
            try:
                await task
            except (ClosedError, asyncio.CancelledError):
                pass
        done = set(handled)
        # An ack that raised (the close shut its link down under it) has an unknown outcome: the
        # broker may have settled the message before the answer was lost. Such a message may come
        # back or not; every other one must.
        unsure = tried - done
        must = set(range(count)) - unsure
        async with harness.backend.messages(topic, sub, ack_deadline=deadline) as consumer:
            rest: list[Message] = []
            try:
                async with asyncio.timeout(harness.patience + deadline * 3):
                    while not must <= done | set(_values(rest)):
                        message = await consumer.next_message()
                        await message.ack()
                        rest.append(message)
            except TimeoutError:
                missing = sorted(must - done - set(_values(rest)))
                raise AssertionError(f"never acked, never delivered after the close: {missing}") from None
        again = done & set(_values(rest))
        assert not again, f"acked before close, delivered again: {sorted(again)}"

    async def test_backend_close_closes_what_it_handed_out(self, harness: Harness) -> None:
        """Consumers and publishers handed out are closed with their backend; a closed backend
        hands out nothing more."""
        other = harness.connect()
        topic, sub, group = harness.name("handed"), harness.name("sub"), harness.name("group")
        pulls: list[Any] = []
        if harness.capabilities.messages:
            pulls += [other.messages(topic, sub).next_message, other.batched_messages(topic, sub).next_batch]
        if harness.capabilities.records:
            pulls += [other.records(topic, group).next_record, other.batched_records(topic, group).next_batch]
        publisher = other.publisher()
        async with asyncio.timeout(harness.patience):
            await other.close()
        for pull in pulls:
            with pytest.raises(ClosedError):
                await pull(timeout=0.5)
        with pytest.raises(ClosedError):
            await publisher.topic(topic).publish(OutboundMessage(b"after close"))
        with pytest.raises(ClosedError):
            other.publisher()
        if harness.capabilities.messages:
            with pytest.raises(ClosedError):
                other.messages(topic, sub)
            with pytest.raises(ClosedError):
                other.batched_messages(topic, sub)
        if harness.capabilities.records:
            with pytest.raises(ClosedError):
                other.records(topic, group)
            with pytest.raises(ClosedError):
                other.batched_records(topic, group)

    async def test_iteration_yields_what_was_asked_for(self, harness: Harness) -> None:
        """``async for`` over a per-item consumer yields items, over a batched one non-empty lists."""
        backend = harness.backend
        async with asyncio.timeout(harness.patience * 3):
            if harness.capabilities.messages:
                topic, one, many = harness.name("kinds"), harness.name("sub"), harness.name("sub")
                await harness.prepare(topic, [one, many])
                async with (
                    backend.messages(topic, one) as messages,
                    backend.batched_messages(topic, many) as batches,
                ):
                    await backend.publisher().topic(topic).batch_publish(*_numbered(0, 2))
                    async for message in messages:
                        assert isinstance(message, Message), type(message)
                        await message.ack()
                        break
                    async for batch in batches:
                        assert isinstance(batch, list) and batch, batch
                        assert all(isinstance(m, Message) for m in batch)
                        for message in batch:
                            await message.ack()
                        break
            if harness.capabilities.records:
                topic = harness.name("kinds")
                await harness.prepare(topic, [])
                await backend.publisher().topic(topic).batch_publish(*_numbered(0, 2))
                async with backend.records(topic, harness.name("group")) as records:
                    async for record in records:
                        assert isinstance(record, Record), type(record)
                        break
                async with backend.batched_records(topic, harness.name("group")) as record_batches:
                    async for record_batch in record_batches:
                        assert isinstance(record_batch, list) and record_batch, record_batch
                        assert all(isinstance(r, Record) for r in record_batch)
                        break

    async def test_crashed_consumer_process_loses_nothing(self, harness: Harness) -> None:
        need(harness, "persistent", "messages", "ack_deadline")
        if harness.url is None:
            pytest.skip("the harness names no url for a consumer process")
        deadline = harness.short_ack_deadline
        topic, sub = harness.name("crash"), harness.name("sub")
        count = 200
        config = {
            "url": harness.url,
            "topic": topic,
            "subscription": sub,
            "options": {"ack_deadline": deadline},
            "pause": 0.01,
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker.driver.testing.crash_consumer",
            json.dumps(config),
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        took: set[int] = set()
        acked: set[int] = set()
        ack_order: list[int] = []

        def read(line: bytes) -> None:
            word, _, value = line.decode().strip().partition(" ")
            if word == "took":
                took.add(int(value))
            elif word == "acked":
                acked.add(int(value))
                ack_order.append(int(value))

        try:
            async with asyncio.timeout(harness.patience * 2):
                while (await process.stdout.readline()).strip() != b"ready":
                    if process.returncode is not None:
                        pytest.fail("the consumer process exited before it was ready")
            await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, count))
            async with asyncio.timeout(harness.patience * 2):
                while len(acked) < count // 4:
                    line = await process.stdout.readline()
                    if not line:
                        pytest.fail("the consumer process died before it was killed")
                    read(line)
        finally:
            if process.returncode is None:
                process.kill()  # SIGKILL: no close, no nack, no flush
            await process.wait()
        for line in (await process.stdout.read()).splitlines():
            read(line)
        killed = clock.monotonic()
        rest: list[Message] = []
        async with harness.backend.messages(topic, sub, ack_deadline=deadline) as consumer:
            async with asyncio.timeout(harness.patience + deadline * 4):
                while acked | set(_values(rest)) != set(range(count)):
                    message = await consumer.next_message()
                    await message.ack()
                    rest.append(message)
            recovered = clock.monotonic() - killed
            rest += await drain(consumer, deadline * 1.5)
        values = _values(rest)
        lost = set(range(count)) - acked - set(values)
        assert not lost, f"lost: {sorted(lost)}"
        twice = {v for v, n in values.items() if n > 1}
        assert not twice, f"delivered twice to the new consumer: {sorted(twice)}"
        # An ack that returned just before the kill may not have reached the broker yet (brokers
        # that acknowledge acks asynchronously): the last few are in-flight work, older ones not.
        in_flight = set(ack_order[-_ACKS_IN_FLIGHT:])
        again = (acked - in_flight) & set(values)
        assert not again, f"acked well before the kill, delivered again: {sorted(again)}"
        assert recovered <= 2 * deadline + harness.patience, f"recovery took {recovered:.1f}s"

    async def test_portable_option_names(self, harness: Harness) -> None:
        need(harness, "messages")
        caps = harness.capabilities
        samples: dict[str, Any] = {
            "ack_deadline": harness.short_ack_deadline,
            "max_attempts": 5,
            "dead_letter_topic": harness.name("dlq"),
        }
        for option in PORTABLE_OPTIONS:
            topic, sub = harness.name("opt"), harness.name("sub")
            value = samples[option.name]
            claimed = option.capability is None or getattr(caps, option.capability)
            options = {option.name: value}
            if option.name == "max_attempts":
                options["dead_letter_topic"] = samples["dead_letter_topic"]
            try:
                async with harness.backend.messages(topic, sub, **options):
                    pass
            except UnknownSetting as exc:
                pytest.fail(f"portable option {option.name!r} answered with UnknownSetting: {exc}")
            except NotSupported as exc:
                assert not claimed, f"{option.name!r} refused though {option.capability} is claimed: {exc}"
            except ConfigError as exc:
                pytest.fail(f"{option.name}={value!r} refused: {exc}")
            else:
                assert claimed, f"{option.name!r} accepted without the capability {option.capability}"

    # -- the records side -----------------------------------------------------------------
    async def test_records_commit_on_ack_survives_close(self, harness: Harness) -> None:
        need(harness, "records")
        topic, group = harness.name("log"), harness.name("group")
        await harness.backend.publisher().topic(topic).batch_publish(*_numbered(0, 20, key="one"))
        async with harness.backend.records(topic, group) as records:
            async with asyncio.timeout(harness.patience):
                for expected in range(10):
                    record = await records.next_record()
                    assert int(record.value or b"-1") == expected, "one key, one partition: in order"
                    await record.ack()
        async with harness.backend.records(topic, group) as records:
            record = await records.next_record(timeout=harness.patience)
        assert int(record.value or b"-1") == 10, "the group did not resume after its last ack"

    async def test_records_rebalance_loses_nothing(self, harness: Harness) -> None:
        need(harness, "records")
        topic, group = harness.name("log"), harness.name("group")
        publisher = harness.backend.publisher().topic(topic)
        await publisher.batch_publish(
            *(OutboundMessage(str(i).encode(), key=f"k{i % 12}") for i in range(60))
        )
        committed: set[int] = set()
        refused_after_revoke = 0

        async def take(iterator: Any) -> bool:
            nonlocal refused_after_revoke
            try:
                record = await iterator.next_record(timeout=0.2)
            except TimeoutError:
                return False
            try:
                await record.ack()
            except AckError:
                refused_after_revoke += 1  # the partition moved on: its new owner reads it again
                return True
            committed.add(int(record.value or b"-1"))
            return True

        first = await harness.backend.records(topic, group).__aenter__()
        second: Any = None
        try:
            async with asyncio.timeout(harness.patience * 2):
                while len(committed) < 20:
                    await take(first)
            second = await harness.backend.records(topic, group).__aenter__()  # partitions move
            await publisher.batch_publish(
                *(OutboundMessage(str(i).encode(), key=f"k{i % 12}") for i in range(60, 120))
            )

            async def drain_into_committed(iterator: Any) -> None:
                while len(committed) < 120:
                    await take(iterator)

            async with asyncio.timeout(harness.patience * 3):
                await asyncio.gather(drain_into_committed(first), drain_into_committed(second))
        except TimeoutError:
            pytest.fail(f"lost across the rebalance: {sorted(set(range(120)) - committed)}")
        finally:
            await first.close()
            if second is not None:
                await second.close()
        async with harness.backend.records(topic, group) as records:
            with pytest.raises(TimeoutError):
                record = await records.next_record(timeout=1.0)
                pytest.fail(f"record {record.value!r} was committed, yet read again after the group closed")
