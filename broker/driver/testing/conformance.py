"""The conformance tests: one body per behaviour, run against every backend.

Each test states one behaviour users rely on and counts messages: nothing lost, duplicates
only where the guarantee allows them.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter
from collections.abc import Sequence

from broker.driver.clock import clock

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

import broker
from broker import adapt
from broker.driver.base import BackendBase
from broker.driver.publishing import DriverPublisher
from broker.driver.testing.backlog import BacklogSuite
from broker.driver.testing.cloudevents import CloudEventsSuite
from broker.driver.testing.harness import (
    Harness,
    clock_ahead,
    collect,
    collect_records,
    drain,
    need,
    subscribed_topic,
    wait_until,
)
from broker.driver.testing.lifecycle import LifecycleSuite
from broker.driver.testing.ping import PingSuite
from broker.driver.testing.provision import ProvisionSuite
from broker.driver.testing.retry import RetrySuite
from broker.driver.testing.server_gone import ServerGoneSuite
from broker.driver.testing.telemetry import TelemetrySuite
from broker.driver.testing.typed import TypedSuite
from broker.errors import ClosedError, ConfigError, InvalidAttributes, InvalidMessage
from broker.interfaces import MessageIterator
from broker.message import Message, OutboundMessage

__all__ = ["ConformanceSuite"]

#: Deliveries before dead-lettering in the dead-letter test (Pub/Sub's smallest allowed value).
_ATTEMPTS = 5


async def _open(
    harness: Harness, *, ack_deadline: float | None = None, subscriptions: int = 1
) -> tuple[str, list[str]]:
    topic = harness.name("topic")
    subs = [harness.name("sub") for _ in range(subscriptions)]
    await harness.prepare(topic, subs)
    return topic, subs


class ConformanceSuite(
    BacklogSuite,
    TelemetrySuite,
    RetrySuite,
    LifecycleSuite,
    ServerGoneSuite,
    TypedSuite,
    CloudEventsSuite,
    PingSuite,
    ProvisionSuite,
):
    """Subclass in a backend's tests and provide an async ``harness`` fixture."""

    # -- publishing and round trips -------------------------------------------------------
    async def test_round_trip_data_key_attributes(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            publisher = harness.backend.publisher()
            sent = [
                OutboundMessage(b"hello", key="k1", attributes={"a": "1", "trace": "xyz"}),
                OutboundMessage(b"", key=None),
                OutboundMessage("naïve ☃ 東京".encode(), key="ключ", attributes={"lang": "ünï"}),
            ]
            for message in sent:
                await publisher.topic(topic).publish(message)
            got = await collect(consumer, len(sent), harness.patience)
        by_data = {m.data: m for m in got}
        assert set(by_data) == {m.data for m in sent}
        for out in sent:
            received = by_data[out.data]
            assert received.key == out.key
            assert dict(received.attributes) == dict(out.attributes)
            assert isinstance(received.id, str) and received.id
            assert received.publish_time is None or received.publish_time > 0

    async def test_publish_interceptors_run_on_every_publish(self, harness: Harness) -> None:
        """The portable layer's publish hook (where tracing and metrics attach) works the same on
        every backend: what an interceptor returns is what is sent, for publish and batch publish."""
        need(harness, "messages")
        publisher = harness.backend.publisher()
        assert isinstance(publisher, DriverPublisher), "every backend publishes through DriverPublisher"
        seen: list[tuple[str, int]] = []

        def stamp(topic: str, messages: Sequence[OutboundMessage]) -> list[OutboundMessage]:
            seen.append((topic, len(messages)))
            return [
                OutboundMessage(m.data, key=m.key, attributes={**m.attributes, "stamped": topic})
                for m in messages
            ]

        publisher.intercept(stamp)
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            await publisher.topic(topic).publish(OutboundMessage(b"one", attributes={"a": "1"}))
            await publisher.topic(topic).batch_publish(OutboundMessage(b"two"), OutboundMessage(b"three"))
            got = await collect(consumer, 3, harness.patience)
        assert seen == [(topic, 1), (topic, 2)]
        assert sorted(m.data for m in got) == [b"one", b"three", b"two"]
        assert all(m.attributes.get("stamped") == topic for m in got)
        assert next(m for m in got if m.data == b"one").attributes.get("a") == "1"

    async def test_large_payload(self, harness: Harness) -> None:
        need(harness, "messages")
        limit = harness.capabilities.max_message_bytes
        size = 1024 * 1024 if limit is None or limit >= 1024 * 1024 + 4096 else limit - 4096
        payload = bytes(range(256)) * (size // 256)
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(payload))
            (message,) = await collect(consumer, 1, harness.patience)
        assert message.data == payload

    async def test_batch_publish_delivers_every_message_once(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, (sub,) = await _open(harness)
        count = 200
        async with harness.messages(topic, sub) as consumer:
            await (
                harness.backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode(), key=f"k{i % 7}") for i in range(count)))
            )
            got = await collect(consumer, count, harness.patience)
            extra = await drain(consumer, 0.3)
        counts = Counter(int(m.data) for m in got + extra)
        assert set(counts) == set(range(count))
        assert max(counts.values()) == 1

    async def test_per_key_order(self, harness: Harness) -> None:
        need(harness, "messages", "per_key_order")
        topic, (sub,) = await _open(harness)
        keys = [f"key-{k}" for k in range(5)]
        sent = [OutboundMessage(f"{k}:{i}".encode(), key=k) for i in range(40) for k in keys]
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).batch_publish(*sent)
            got = await collect(consumer, len(sent), harness.patience)
        for k in keys:
            sequence = [int(m.data.split(b":")[1]) for m in got if m.key == k]
            assert sequence == list(range(40)), f"order broken for {k}"

    async def test_publish_after_close_raises(self, harness: Harness) -> None:
        topic = harness.name("topic")
        publisher = harness.backend.publisher()
        handle = publisher.topic(topic)
        await publisher.close()
        await publisher.close()  # idempotent
        with pytest.raises(ClosedError):
            await handle.publish(OutboundMessage(b"late"))

    async def test_publishers_share_one_client_and_leave_the_resource_list(self, harness: Harness) -> None:
        """``backend.publisher()`` is cheap to ask for, as the docs' inline
        ``backend.publisher().topic(t).publish(m)`` needs: every publisher shares the backend's one
        client (driver), and a publisher closed or dropped leaves the backend's resource list. 10,000
        calls (100,000 on ``inmem://`` in ``tests/unit/test_publisher_sharing.py``), half of them
        closed, keep both bounded, and the messages published through the first and a late
        publisher both arrive."""
        need(harness, "messages")
        backend = harness.backend
        inner = getattr(backend, "wrapped", backend)  # an instrumented backend's list is its backend's
        assert isinstance(inner, BackendBase)
        calls = 10_000
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            before = len(inner.resources)
            first = backend.publisher()
            assert isinstance(first, DriverPublisher)
            await first.topic(topic).publish(OutboundMessage(b"first"))
            drivers = {id(first.driver): first.driver}  # strong references: ids stay unique
            most = 0
            call = 0
            while call < calls:
                call += 1
                publisher = backend.publisher()
                assert isinstance(publisher, DriverPublisher)
                drivers.setdefault(id(publisher.driver), publisher.driver)
                if call % 2:
                    await publisher.close()
                if call % 10 == 0:  # a sample: a leak grows past any bound all the same
                    most = max(most, len(inner.resources) - before)
                if len(drivers) > 8 or most > 8:  # stop early where each call costs a client
                    break
            del publisher
            await backend.publisher().topic(topic).publish(OutboundMessage(b"late"))
            got = await collect(consumer, 2, harness.patience)
            outcome = f"after {call} calls: {len(drivers)} clients, up to {most} resources added"
            assert (call, len(drivers), most <= 2) == (calls, 1, True), outcome
            assert sorted(m.data for m in got) == [b"first", b"late"]
            await first.close()
            assert len(inner.resources) == before, "closed and dropped publishers leave the list"

    async def test_bad_attributes_and_data_raise_type_errors(self, harness: Harness) -> None:
        topic = harness.name("topic")
        handle = harness.backend.publisher().topic(topic)
        bad_attributes: list[object] = [{"n": 1}, {"n": None}, {1: "v"}, {"": "v"}, ["a", "b"]]
        for attributes in bad_attributes:
            with pytest.raises(InvalidAttributes):
                await handle.publish(OutboundMessage(b"x", attributes=attributes))  # type: ignore[arg-type]
        bad_messages: list[object] = [
            OutboundMessage(None),  # type: ignore[arg-type]
            OutboundMessage("not bytes"),  # type: ignore[arg-type]
            OutboundMessage(b"x", key=5),  # type: ignore[arg-type]
            OutboundMessage(b"x", key=b"bytes-key"),  # type: ignore[arg-type]
            b"not a message",
            None,
        ]
        for bad in bad_messages:
            with pytest.raises(InvalidMessage) as caught:
                await handle.publish(bad)  # type: ignore[arg-type]
            assert isinstance(caught.value, TypeError), "InvalidMessage is also a TypeError"
            with pytest.raises(InvalidMessage):
                await handle.batch_publish(OutboundMessage(b"ok"), bad)  # type: ignore[arg-type]
        with pytest.raises(InvalidAttributes):
            await handle.batch_publish(OutboundMessage(b"ok"), OutboundMessage(b"x", attributes={1: "v"}))  # type: ignore[dict-item]

    async def test_bad_urls_raise_config_errors(self, harness: Harness) -> None:
        for url in ["nosuchbroker://x", "not a url", *harness.bad_urls]:
            with pytest.raises(ConfigError):
                broker.connect(url)
        scheme = harness.backend.name
        with pytest.raises(ConfigError, match="no_such_setting"):
            broker.connect({"backend": scheme, "no_such_setting": "1"})

    async def test_bad_consumer_arguments_raise_config_errors_before_anything_opens(
        self, harness: Harness
    ) -> None:
        backend = harness.backend
        topic = harness.name("badargs")
        if harness.capabilities.messages:
            with pytest.raises(ConfigError):
                backend.batched_messages(topic, "s", batch_size=-1)
            with pytest.raises(ConfigError):
                backend.batched_messages(topic, "s", batch_timeout=-1.0)
            with pytest.raises(ConfigError):
                backend.messages(topic, "s", no_such_option=1)
        if harness.capabilities.records:
            with pytest.raises(ConfigError):
                backend.batched_records(topic, "g", batch_size=-1)
            with pytest.raises(ConfigError):
                backend.records(topic, "g", no_such_option=1)

    # -- acknowledgement ------------------------------------------------------------------
    async def test_acked_message_is_not_redelivered(self, harness: Harness) -> None:
        need(harness, "messages", "ack_deadline")
        deadline = harness.short_ack_deadline
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"once"))
            (message,) = await collect(consumer, 1, harness.patience)
            await message.ack()  # a second ack is a no-op
            assert message.state == "acked"
            with pytest.raises(TimeoutError):
                # The deadline runs from the delivery, before the ack: had the ack been lost, the
                # message would be back within past_redelivery() (the deadline plus the broker's slack).
                await consumer.next_message(timeout=harness.past_redelivery())

    async def test_ack_after_nack_raises(self, harness: Harness) -> None:
        need(harness, "messages", "nack_redelivers")
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"n"))
            (message,) = await collect(consumer, 1, harness.patience, ack=False)
            await message.nack()
            with pytest.raises(broker.errors.AckError):
                await message.ack()
            (again,) = await collect(consumer, 1, harness.patience)
            assert again.data == b"n"

    async def test_nack_redelivers(self, harness: Harness) -> None:
        need(harness, "messages", "nack_redelivers")
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"retry-me"))
            (first,) = await collect(consumer, 1, harness.patience, ack=False)
            await first.nack()
            (second,) = await collect(consumer, 1, harness.patience)
        assert second.data == b"retry-me"
        assert second.id == first.id
        if harness.capabilities.delivery_attempt:
            assert first.delivery_attempt == 1
            assert second.delivery_attempt == 2

    async def test_delayed_nack_waits(self, harness: Harness) -> None:
        need(harness, "messages", "delayed_nack")
        # Long enough that a redelivery ignoring the delay (a plain nack's) cannot pass for a
        # delayed one, and independent of a long ack deadline: the delay has a timer of its own.
        delay = min(max(1.0, harness.short_ack_deadline), 2.0)
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"later"))
            (first,) = await collect(consumer, 1, harness.patience, ack=False)
            started = clock.monotonic()
            await first.nack(delay=delay)
            (second,) = await collect(consumer, 1, harness.patience + delay)
            waited = clock.monotonic() - started
        assert second.data == b"later"
        assert waited >= delay * 0.8, f"redelivered after {waited:.2f}s, delay was {delay}s"

    async def test_ack_deadline_redelivers(self, harness: Harness) -> None:
        need(harness, "messages", "ack_deadline")
        deadline = harness.short_ack_deadline
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"forgotten"))
            await collect(consumer, 1, harness.patience, ack=False)
            started = clock.monotonic()
            (second,) = await collect(consumer, 1, harness.patience + deadline * 3)
            waited = clock.monotonic() - started
        assert second.data == b"forgotten"
        assert waited >= deadline * 0.5, f"redelivered after {waited:.2f}s, before the {deadline}s deadline"
        assert waited <= deadline * 2 + 2.0, f"redelivered after {waited:.2f}s with a {deadline}s deadline"
        if harness.capabilities.delivery_attempt:
            assert second.delivery_attempt == 2

    async def test_in_progress_extends_the_deadline(self, harness: Harness) -> None:
        need(harness, "messages", "ack_deadline", "in_progress")
        deadline = harness.short_ack_deadline
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"slow"))
            (message,) = await collect(consumer, 1, harness.patience, ack=False)
            # Held past the point where an unextended message is back (deadline plus slack from
            # the delivery), so an in_progress() that does not extend fails here.
            held_until = clock.monotonic() + harness.past_redelivery()
            while clock.monotonic() < held_until:
                await message.in_progress()
                with pytest.raises(TimeoutError):
                    await consumer.next_message(timeout=deadline / 3)
            await message.ack()
            with pytest.raises(TimeoutError):
                # The last in_progress() came just before the ack: a lost ack shows within
                # past_redelivery() of it.
                await consumer.next_message(timeout=harness.past_redelivery())

    async def test_an_ack_after_the_deadline_is_sent_and_raises_naming_it(self, harness: Harness) -> None:
        """An ack that comes after the message's ack deadline (counted from its delivery or its last
        ``in_progress()``) on the client's clock is still sent, then raises AckError naming the
        deadline; the message stays acked. The client's clock runs ahead here: the broker's own
        deadline has not passed, so the ack that was sent is the one that settles the message."""
        need(harness, "messages", "ack_deadline")
        deadline = harness.short_ack_deadline
        extends = harness.capabilities.in_progress
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            await (
                harness.backend.publisher()
                .topic(topic)
                .batch_publish(OutboundMessage(b"kept"), OutboundMessage(b"late"))
            )
            kept, late = sorted(await collect(consumer, 2, harness.patience, ack=False), key=lambda m: m.data)
            assert (kept.data, late.data) == (b"kept", b"late")
            with clock_ahead(deadline * 0.5):
                if extends:
                    await kept.in_progress()  # its deadline now runs from here
                with clock_ahead(deadline * 0.75):  # 1.25 deadlines after the delivery
                    if extends:
                        await kept.ack()  # 0.75 of a deadline after its in_progress(): in time
                    with pytest.raises(broker.errors.AckError, match=f"ack deadline of {deadline:g}s"):
                        await late.ack()
            assert late.state == "acked", "a late ack is sent: the message is acked"
            await late.ack()  # acking again is a no-op
            if not extends:
                await kept.ack()
            assert kept.state == "acked"
        if harness.backend.name == "inmem":
            assert await harness.backend.backlog(topic, sub) == 0

    async def test_a_handler_that_returns_without_settling_is_warned_about(
        self, harness: Harness, caplog: pytest.LogCaptureFixture
    ) -> None:
        """``backend.receiver(...)``: a handler that returns without acking, nacking or dead-lettering
        its message gets one WARNING naming it and the message (the broker would redeliver the
        message after its deadline, again and again, with nothing in the logs)."""
        need(harness, "messages")
        topic, sub = await subscribed_topic(harness, "unsettled")
        caplog.set_level(logging.WARNING, logger="broker.settle")
        handed: list[Message] = []

        async def forgetful_handler(message: Message) -> None:
            handed.append(message)

        receiver = harness.backend.receiver(topic, sub)
        task = asyncio.ensure_future(receiver.receive(forgetful_handler))
        try:
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"forgotten"))

            def warned() -> bool:
                return any(r.name == "broker.settle" for r in caplog.records) or task.done()

            await wait_until(warned, harness.patience)
            assert not task.done(), task
            await handed[0].ack()  # settled now: nothing left for the broker to redeliver
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        assert [m.data for m in handed] == [b"forgotten"]
        warnings = [r for r in caplog.records if r.name == "broker.settle"]
        assert len(warnings) == 1, [r.getMessage() for r in warnings]
        assert warnings[0].levelno == logging.WARNING
        text = warnings[0].getMessage()
        assert forgetful_handler.__qualname__ in text and handed[0].id in text, text

    async def test_dead_letter_after_max_attempts(self, harness: Harness) -> None:
        need(harness, "messages", "dead_letter", "nack_redelivers")
        topic, (sub,) = await _open(harness)
        dlq = harness.name("dlq")
        options = harness.dead_letter_options(
            max_attempts=_ATTEMPTS, topic=dlq, source_topic=topic, source_subscription=sub
        )
        if options is None:
            pytest.skip("the harness names no dead-letter options for this backend")
        async with (
            harness.messages(dlq, "inspect") as dead,
            harness.backend.messages(topic, sub, **options) as consumer,
        ):
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"poison"))
            for _ in range(_ATTEMPTS):
                (message,) = await collect(consumer, 1, harness.patience, ack=False)
                await message.nack()
            with pytest.raises(TimeoutError):  # used up: not delivered again
                await consumer.next_message(timeout=1.0)
            (letter,) = await collect(dead, 1, harness.patience)
            assert letter.data == b"poison"

    # -- several consumers, restarts ------------------------------------------------------
    async def test_competing_consumers_split_the_work(self, harness: Harness) -> None:
        need(harness, "messages", "competing_consumers")
        topic, (sub,) = await _open(harness)
        handle = harness.backend.publisher().topic(topic)
        wave = 100
        published = 0
        seen: dict[str, list[int]] = {"first": [], "second": []}
        progress = asyncio.Event()

        async def consume(name: str, consumer: MessageIterator) -> None:
            try:
                while True:
                    try:
                        message = await consumer.next_message(timeout=0.5)
                    except TimeoutError:
                        continue
                    await message.ack()
                    seen[name].append(int(message.data))
                    progress.set()
            finally:
                progress.set()  # a consumer that failed wakes the test, which raises its error

        async with harness.messages(topic, sub) as first, harness.messages(topic, sub) as second:
            workers = [
                asyncio.ensure_future(consume("first", first)),
                asyncio.ensure_future(consume("second", second)),
            ]
            try:
                async with asyncio.timeout(harness.patience * 3):
                    # Work comes in waves until both consumers have had some of it. A wave may
                    # rightly go to one consumer: on Kafka a burst of keyless records lands in one
                    # partition (sticky partitioning), and a member gets partitions only once the
                    # group has formed.
                    while True:
                        progress.clear()
                        # distinct values: a redelivery must not stand in for a message not yet seen
                        if len({*seen["first"], *seen["second"]}) >= published:
                            if seen["first"] and seen["second"]:
                                break
                            await handle.batch_publish(
                                *(
                                    OutboundMessage(str(i).encode())
                                    for i in range(published, published + wave)
                                )
                            )
                            published += wave
                        for worker in workers:
                            if worker.done():
                                worker.result()  # a consumer failed: raise its error
                        await progress.wait()
            except TimeoutError:
                counts = {name: len(values) for name, values in seen.items()}
                raise AssertionError(
                    f"after {published} messages in waves of {wave}: received {counts}; "
                    "lost messages, or one consumer got all the work"
                ) from None
            finally:
                for worker in workers:
                    worker.cancel()
                await asyncio.gather(*workers, return_exceptions=True)
        everything = seen["first"] + seen["second"]
        assert sorted(set(everything)) == list(range(published)), "messages were lost"
        assert len(everything) == published, "messages were delivered twice"

    async def test_no_loss_across_consumer_restart(self, harness: Harness) -> None:
        need(harness, "messages", "ack_deadline")
        deadline = harness.short_ack_deadline
        topic, (sub,) = await _open(harness)
        count = 30
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            await (
                harness.backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
            )
            handled = await collect(consumer, 10, harness.patience)
            await collect(consumer, 1, harness.patience, ack=False)  # taken, never acked: the "crash"
        async with harness.messages(topic, sub, ack_deadline=deadline) as consumer:
            rest = await collect(consumer, count - 10, harness.patience + deadline * 3)
            # A lost ack shows as a redelivery within past_redelivery() of the delivery it settled,
            # and every delivery came before this quiet window opens (at most the 1.5 deadlines it
            # is where the slack is not measured: the last message came a deadline after the rest).
            rest += await drain(consumer, min(deadline * 1.5, harness.past_redelivery()))
        values = Counter(int(m.data) for m in handled + rest)
        assert set(values) == set(range(count)), f"lost: {set(range(count)) - set(values)}"
        assert all(n == 1 for n in values.values()), "an acked message was delivered again"

    # -- shutdown -------------------------------------------------------------------------
    async def test_close_wakes_a_blocked_consumer(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, (sub,) = await _open(harness)
        consumer = harness.messages(topic, sub)
        waiting = asyncio.ensure_future(consumer.next_message())
        await asyncio.sleep(0.2)
        async with asyncio.timeout(harness.patience):
            await consumer.close()
            with pytest.raises(ClosedError):
                await waiting
        await consumer.close()  # idempotent
        with pytest.raises(ClosedError):
            await consumer.next_message(timeout=0.1)

    async def test_cancel_does_not_hang_or_lose(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, (sub,) = await _open(harness)
        async with harness.messages(topic, sub) as consumer:
            waiting = asyncio.ensure_future(consumer.next_message())
            await asyncio.sleep(0.2)
            waiting.cancel()
            async with asyncio.timeout(harness.patience):
                with pytest.raises(asyncio.CancelledError):
                    await waiting
            await harness.backend.publisher().topic(topic).publish(OutboundMessage(b"after-cancel"))
            (message,) = await collect(consumer, 1, harness.patience)
        assert message.data == b"after-cancel"

    async def test_receiver_handles_all_and_nacks_on_cancel(self, harness: Harness) -> None:
        need(harness, "messages", "nack_redelivers")
        topic, (sub,) = await _open(harness)
        count = 50
        handled: list[int] = []
        failed_once: set[int] = set()
        blocked = asyncio.Event()
        all_handled = asyncio.Event()

        async def handler(message: Message) -> None:
            value = int(message.data)
            if value % 10 == 3 and value not in failed_once:
                failed_once.add(value)
                raise RuntimeError("handler failure: the receiver must nack and carry on")
            if value == count:  # the last one blocks until the receiver is cancelled
                blocked.set()
                await asyncio.sleep(3600)
            handled.append(value)
            await message.ack()
            if len(set(handled)) == count:
                all_handled.set()

        source = await harness.messages(topic, sub).__aenter__()  # subscribed from here on
        receiver = adapt.receiver(source, concurrency=4)
        task = asyncio.ensure_future(receiver.receive(handler))
        await (
            harness.backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
        )
        async with asyncio.timeout(harness.patience * 2):
            await all_handled.wait()
        await harness.backend.publisher().topic(topic).publish(OutboundMessage(str(count).encode()))
        async with asyncio.timeout(harness.patience):
            await blocked.wait()
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await task
            await source.close()
        assert sorted(set(handled)) == list(range(count))
        assert failed_once == {3, 13, 23, 33, 43}
        # The message whose handler was interrupted was nacked, so it comes back.
        async with harness.messages(topic, sub) as consumer:
            (again,) = await collect(consumer, 1, harness.patience)
        assert int(again.data) == count

    async def test_batched_messages(self, harness: Harness) -> None:
        need(harness, "messages")
        topic, (sub,) = await _open(harness)
        count = 25
        async with harness.backend.batched_messages(topic, sub, batch_size=10, batch_timeout=0.5) as batches:
            await (
                harness.backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
            )
            seen: list[int] = []
            async with asyncio.timeout(harness.patience):
                while len(seen) < count:
                    batch = await batches.next_batch()
                    assert len(batch) <= 10
                    await broker.ack_all(batch)
                    seen.extend(int(m.data) for m in batch)
        assert sorted(seen) == list(range(count))

    # -- partitioned log ------------------------------------------------------------------
    async def test_records_in_a_group_resume_after_commit(self, harness: Harness) -> None:
        need(harness, "records")
        topic = harness.name("log")
        group = harness.name("group")
        await harness.prepare(topic, [])
        count = 20
        await (
            harness.backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(str(i).encode(), key=f"k{i % 3}") for i in range(count)))
        )
        async with harness.records(topic, group) as records:
            first = await collect_records(records, 12, harness.patience)
            last_by_partition: dict[int, int] = {}
            for record in first:
                assert record.offset > last_by_partition.get(record.partition, -1)
                last_by_partition[record.partition] = record.offset
            await broker.commit_highest_offsets(first)
        async with harness.records(topic, group) as records:
            rest = await collect_records(records, count - 12, harness.patience)
        values = sorted(int(r.value or b"") for r in first + rest)
        assert values == list(range(count)), "records were lost or re-read after commit"

    async def test_transactions_commit_and_abort(self, harness: Harness) -> None:
        need(harness, "transactions", "records")
        topic = harness.name("txn")
        await harness.prepare(topic, [])
        publisher = harness.backend.transactional_publisher()
        try:
            handle = publisher.topic(topic)
            await publisher.begin()
            await handle.publish(OutboundMessage(b"aborted"))
            assert await publisher.abort()
            await publisher.begin()
            await handle.batch_publish(OutboundMessage(b"c1"), OutboundMessage(b"c2"))
            assert await publisher.commit()
        finally:
            await publisher.close()
        async with harness.records(topic, harness.name("group")) as records:
            got = await collect_records(records, 2, harness.patience)
            with pytest.raises(TimeoutError):
                await records.next_record(timeout=0.5)
        assert sorted(r.value or b"" for r in got) == [b"c1", b"c2"]
