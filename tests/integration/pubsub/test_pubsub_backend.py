"""Pub/Sub behaviour beyond the conformance suite, against Google's emulator.

Ordering keys, dead-lettering after N attempts, ack-deadline expiry, graceful shutdown of a
streaming receiver with messages in flight, and the error cases. Tests count messages and
wait for conditions (with a timeout) instead of sleeping.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import itertools
import time
import uuid
from collections import Counter
from collections.abc import AsyncIterator

import pytest

import broker
from broker.backends.pubsub.backend import PubsubBackend
from broker.backends.pubsub.receiver import PubsubReceiver
from broker.driver.devserver import ProcessServer
from broker.driver.settings import describe
from broker.errors import AckError, ClosedError, ConfigError, MessageTooLarge, UnknownTopic
from broker.message import Message, OutboundMessage
from broker.testing import collect, drain

PATIENCE = 15.0
_names = itertools.count()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}-{next(_names)}"


async def connect(emulator: ProcessServer, **settings: str) -> PubsubBackend:
    query = "".join(f"&{key}={value}" for key, value in settings.items())
    backend = broker.connect(emulator.url + query)
    assert isinstance(backend, PubsubBackend)
    return backend


@pytest.fixture
async def backend(pubsub_emulator: ProcessServer) -> AsyncIterator[PubsubBackend]:
    async with await connect(pubsub_emulator) as b:
        yield b


@pytest.fixture
async def ordered(pubsub_emulator: ProcessServer) -> AsyncIterator[PubsubBackend]:
    async with await connect(pubsub_emulator, message_ordering="true") as b:
        yield b


async def until(condition: asyncio.Event, what: str, timeout: float = PATIENCE) -> None:
    try:
        async with asyncio.timeout(timeout):
            await condition.wait()
    except TimeoutError:
        pytest.fail(f"timed out after {timeout}s waiting for {what}")


async def run_receiver(
    receiver: PubsubReceiver, handler: object, batched: bool = False
) -> asyncio.Task[None]:
    if batched:
        return asyncio.ensure_future(receiver.receive_batch(handler))  # type: ignore[arg-type]
    return asyncio.ensure_future(receiver.receive(handler))  # type: ignore[arg-type]


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    async with asyncio.timeout(PATIENCE):
        with pytest.raises(asyncio.CancelledError):
            await task


# -- settings, URL, capabilities -------------------------------------------------------------
def test_url_settings_capabilities_and_secrets(pubsub_emulator: ProcessServer) -> None:
    host = pubsub_emulator.url.split("emulator_host=")[1]
    backend = broker.connect(
        {
            "backend": "pubsub",
            "project": "secret-test",
            "emulator_host": host,
            "credentials_json": '{"private_key": "TOPSECRET"}',
            "dead_letter_topic": "dead",
        }
    )
    assert isinstance(backend, PubsubBackend)
    assert "TOPSECRET" not in repr(backend.settings)
    assert describe(backend.settings)["credentials_json"] == "***"
    caps = backend.capabilities
    assert caps.delivery_attempt and caps.dead_letter and not caps.per_key_order
    assert caps.max_message_bytes == 10_000_000
    assert broker.connect(pubsub_emulator.url + "&message_ordering=true").capabilities.per_key_order
    assert not broker.connect(pubsub_emulator.url).capabilities.delivery_attempt
    with pytest.raises(ConfigError, match="project"):
        broker.connect("pubsub://?emulator_host=" + host)


def test_missing_emulator_fails_naming_the_debian_package(monkeypatch: pytest.MonkeyPatch) -> None:
    from broker.backends.pubsub import emulator

    monkeypatch.setattr(emulator, "_candidates", lambda: [])
    with pytest.raises(emulator.EmulatorNotFound, match="google-cloud-cli-pubsub-emulator"):
        emulator.find_launcher()


# -- publishing ------------------------------------------------------------------------------
async def test_publish_errors(pubsub_emulator: ProcessServer, backend: PubsubBackend) -> None:
    topic = backend.publisher().topic(name("topic"))
    with pytest.raises(MessageTooLarge):
        await topic.publish(OutboundMessage(b"x" * 10_000_001))
    async with await connect(pubsub_emulator, create_missing="false") as strict:
        with pytest.raises(UnknownTopic):
            await strict.publisher().topic(name("missing")).publish(OutboundMessage(b"x"))
        with pytest.raises(UnknownTopic):
            await strict.messages(name("missing"), name("sub")).next_message(timeout=5)


async def test_attribute_names_that_clash_with_client_keywords_round_trip(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    odd = {"topic": "t", "data": "d", "ordering_key": "o", "retry": "r", "timeout": "9"}
    publisher = backend.publisher().topic(topic)
    await publisher.publish(OutboundMessage(b"single", attributes=odd))
    await publisher.batch_publish(OutboundMessage(b"plain"), OutboundMessage(b"batched", attributes=odd))
    async with backend.messages(topic, sub) as consumer:
        got = {m.data: dict(m.attributes) for m in await collect(consumer, 3, PATIENCE)}
    assert got == {b"single": odd, b"plain": {}, b"batched": odd}


async def test_large_batch_is_published_once_each_and_the_loop_stays_responsive(
    backend: PubsubBackend,
) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    count = 3000
    lags: list[float] = []
    busy: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        loop = asyncio.get_running_loop()
        while not done.is_set():
            before, cpu = loop.time(), time.thread_time()
            await asyncio.sleep(0.01)
            lags.append(loop.time() - before - 0.01)
            busy.append(time.thread_time() - cpu)

    # CI once saw one 0.45 s turn late in a full run (0.05 s alone). The likeliest cause is a full
    # collection over the objects earlier tests of this worker left behind: the interpreter's
    # pause, not the publisher's work. Frozen, those objects are not scanned (the batch's own
    # garbage still is), and a failure reports the collections' pauses to tell the two apart.
    pauses: list[float] = []
    started: list[float] = []

    def timed(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            started[:] = [time.thread_time()]
        elif started:
            pauses.append(time.thread_time() - started[0])

    gc.collect()
    gc.freeze()
    gc.callbacks.append(timed)
    try:
        tick = asyncio.ensure_future(ticker())
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
        )
        done.set()
        await tick
    finally:
        gc.callbacks.remove(timed)
        gc.unfreeze()
    # The loop's thread never worked for more than a quarter second between two turns: CPU time
    # of that thread, which a loaded CI host descheduling the whole process does not inflate (it
    # did inflate the wall-clock lag past 0.25 s once). A wait the loop's thread sleeps in (a
    # blocking socket call) shows in the wall-clock lag, bounded more loosely for that reason.
    assert max(busy) < 0.25, (
        f"the event loop's thread ran {max(busy):.3f}s without a turn"
        f" (garbage collection: {len(pauses)} pauses, longest {max(pauses, default=0):.3f}s)"
    )
    assert max(lags) < 1.0, f"the event loop was blocked for {max(lags):.3f}s"
    async with backend.batched_messages(topic, sub, batch_size=500) as batches:
        seen: Counter[int] = Counter()
        async with asyncio.timeout(PATIENCE * 2):
            while len(seen) < count:
                batch = await batches.next_batch()
                await broker.ack_all(batch)
                seen.update(int(m.data) for m in batch)
    assert set(seen) == set(range(count)) and max(seen.values()) == 1


# -- subscriptions ---------------------------------------------------------------------------
async def test_a_subscription_name_taken_by_another_topic_is_a_config_error(backend: PubsubBackend) -> None:
    # Pub/Sub subscription names are project-wide: the name of one topic's subscription cannot
    # name another topic's. The error names the owning topic, and the owner's subscription and
    # its backlog stay as they were.
    owner, other, sub = name("topic"), name("topic"), name("sub")
    await backend.ensure_subscription(owner, sub)
    sent = [OutboundMessage(f"m{i}".encode()) for i in range(3)]
    await backend.publisher().topic(owner).batch_publish(*sent)
    with pytest.raises(ConfigError, match=owner) as caught:
        async with backend.messages(other, sub):
            pass
    assert sub in str(caught.value) and other in str(caught.value)
    with pytest.raises(ConfigError, match=owner):
        await backend.ensure_subscription(other, sub)
    async with backend.messages(owner, sub) as consumer:
        got = await collect(consumer, 3, PATIENCE)
        await broker.ack_all(got)
    assert sorted(m.data for m in got) == [m.data for m in sent]


async def test_a_subscription_detached_by_deleting_its_topic_is_a_config_error(
    pubsub_emulator: ProcessServer,
) -> None:
    # Deleting a topic detaches its subscriptions: the server then names their topic
    # "_deleted-topic_". Using such a subscription, even with its old topic recreated, is a
    # ConfigError that says so (delete and recreate it), not one about a topic of that name.
    topic, sub = name("topic"), name("sub")
    async with await connect(pubsub_emulator) as backend:
        await backend.ensure_subscription(topic, sub)
        await backend.clients.admin_publisher().delete_topic(topic=backend.clients.topic_path(topic))
    async with await connect(pubsub_emulator) as backend:
        with pytest.raises(ConfigError, match="detached") as caught:
            async with backend.messages(topic, sub):
                pass
    message = str(caught.value)
    assert sub in message and "deleted" in message and "_deleted-topic_" not in message


# -- ordering keys ---------------------------------------------------------------------------
async def test_ordering_keys_keep_per_key_order_through_a_concurrent_receiver(ordered: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    await ordered.ensure_subscription(topic, sub, message_ordering=True)
    keys = [f"key-{k}" for k in range(4)]
    per_key = 60
    publisher = ordered.publisher().topic(topic)
    await publisher.batch_publish(
        *(OutboundMessage(f"{i}".encode(), key=k) for i in range(per_key // 2) for k in keys)
    )
    for i in range(per_key // 2, per_key):  # single publishes, interleaved keys
        await asyncio.gather(*(publisher.publish(OutboundMessage(f"{i}".encode(), key=k)) for k in keys))

    seen: dict[str, list[int]] = {k: [] for k in keys}
    everything = asyncio.Event()

    async def handler(message: Message) -> None:
        assert message.key in seen
        await asyncio.sleep(0.001 * (hash(message.id) % 5))  # handlers finish out of order
        seen[message.key].append(int(message.data))
        await message.ack()
        if sum(map(len, seen.values())) == per_key * len(keys):
            everything.set()

    task = await run_receiver(ordered.receiver(topic, sub, concurrency=8), handler)
    await until(everything, "every keyed message")
    await stop(task)
    for key, values in seen.items():
        assert values == list(range(per_key)), f"order broken for {key}"


# -- dead letters ----------------------------------------------------------------------------
async def test_dead_letter_after_max_attempts_with_attempt_counts(pubsub_emulator: ProcessServer) -> None:
    dead = name("dead")
    async with await connect(pubsub_emulator, dead_letter_topic=dead, max_delivery_attempts="5") as backend:
        topic, sub = name("topic"), name("sub")
        await backend.ensure_subscription(dead, "inspect-" + dead)  # before anything is dead-lettered
        await backend.ensure_subscription(topic, sub)
        await backend.publisher().topic(topic).publish(OutboundMessage(b"poison", attributes={"a": "1"}))
        attempts = []
        async with backend.messages(topic, sub) as consumer:
            for _ in range(5):
                (message,) = await collect(consumer, 1, PATIENCE, ack=False)
                attempts.append(message.delivery_attempt)
                await message.nack()
            # The emulator forwards to the dead-letter topic when it would deliver once more
            # (the real service does it in the background): this pull is what triggers it.
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=1.0)
            async with backend.messages(dead, "inspect-" + dead) as letters:
                (letter,) = await collect(letters, 1, PATIENCE)
        assert attempts == [1, 2, 3, 4, 5]
        assert letter.data == b"poison" and letter.attributes["a"] == "1"


async def test_dead_letter_by_the_consumer_forwards_with_the_reason(pubsub_emulator: ProcessServer) -> None:
    dead = name("dead")
    async with await connect(pubsub_emulator, dead_letter_topic=dead) as backend:
        topic, sub = name("topic"), name("sub")
        await backend.ensure_subscription(dead, "inspect-" + dead)
        await backend.ensure_subscription(topic, sub)
        await (
            backend.publisher().topic(topic).batch_publish(OutboundMessage(b"bad"), OutboundMessage(b"worse"))
        )
        handled = asyncio.Event()

        async def handler(message: Message) -> None:
            await message.dead_letter(f"cannot parse {message.data.decode()}")
            if message.data == b"worse":
                handled.set()

        receiver = backend.receiver(topic, sub, concurrency=1)
        task = await run_receiver(receiver, handler)
        async with backend.messages(dead, "inspect-" + dead) as letters:
            got = await collect(letters, 2, PATIENCE)
        await stop(task)
        reasons = {m.data: m.attributes["dead_letter_reason"] for m in got}
        assert reasons == {b"bad": "cannot parse bad", b"worse": "cannot parse worse"}
        assert all(m.attributes["dead_letter_source"].endswith(sub) for m in got)
        async with backend.messages(topic, sub) as consumer:
            assert await drain(consumer, 1.0) == []  # acked at the source


# -- deadlines -------------------------------------------------------------------------------
async def test_ack_deadline_expiry_redelivers_to_a_competing_consumer(pubsub_emulator: ProcessServer) -> None:
    async with await connect(pubsub_emulator, dead_letter_topic=name("dead")) as backend:
        topic, sub = name("topic"), name("sub")
        await backend.ensure_subscription(topic, sub, ack_deadline=10)
        await backend.publisher().topic(topic).publish(OutboundMessage(b"slow"))
        async with backend.messages(topic, sub) as first, backend.messages(topic, sub) as second:
            (taken,) = await collect(first, 1, PATIENCE, ack=False)
            started = time.monotonic()
            with pytest.raises(TimeoutError):  # still leased to the first consumer
                await second.next_message(timeout=5)
            (again,) = await collect(second, 1, PATIENCE)
            waited = time.monotonic() - started
            assert again.id == taken.id and again.data == b"slow"
            assert (taken.delivery_attempt, again.delivery_attempt) == (1, 2)
            assert 8.0 <= waited <= 14.0, f"redelivered after {waited:.1f}s with a 10s deadline"
            with pytest.raises(AckError, match="ack deadline of 10s"):
                await taken.ack()  # late: sent (a stale copy's ack is harmless), and said so
            with pytest.raises(TimeoutError):
                await first.next_message(timeout=1.0)


async def test_receiver_delayed_nack_is_not_extended_by_lease_management(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    await backend.publisher().topic(topic).publish(OutboundMessage(b"later"))
    deliveries: list[float] = []
    twice = asyncio.Event()

    async def handler(message: Message) -> None:
        deliveries.append(time.monotonic())
        if len(deliveries) == 1:
            await message.nack(delay=3)
        else:
            await message.ack()
            twice.set()

    task = await run_receiver(backend.receiver(topic, sub, concurrency=2), handler)
    await until(twice, "the redelivery after a delayed nack")
    await stop(task)
    gap = deliveries[1] - deliveries[0]
    assert 2.5 <= gap <= 9.0, f"redelivered after {gap:.1f}s, the delay was 3s"


# -- streaming receivers and shutdown --------------------------------------------------------
async def test_graceful_shutdown_with_messages_in_flight(pubsub_emulator: ProcessServer) -> None:
    # The emulator keeps part of what a closed stream held leased until the stream's ack
    # deadline, nacked or not (see broker.backends.pubsub.receiver): make that deadline 10 s. Such
    # messages were seen back after one or two deadlines.
    backend = await connect(pubsub_emulator, receive_max_extension_period="10")
    async with backend:
        await _graceful_shutdown(backend)


async def _graceful_shutdown(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    count = 300
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
    started: set[int] = set()
    acking: set[int] = set()
    acked: list[int] = []
    halfway = asyncio.Event()

    async def handler(message: Message) -> None:
        value = int(message.data)
        started.add(value)
        await asyncio.sleep(0.02)  # in flight: cancellation lands here
        acking.add(value)
        await message.ack()
        acked.append(value)
        if len(acked) >= count // 3:
            halfway.set()

    receiver = backend.receiver(topic, sub, concurrency=8)
    task = await run_receiver(receiver, handler)
    await until(halfway, "a third of the messages")
    await stop(task)
    interrupted = started - set(acked)
    assert interrupted, "no handler was in flight when the receiver stopped"
    assert len(acked) == len(set(acked)) < count

    # An ack the stop cut short may or may not have reached the emulator: either outcome is right.
    uncertain = acking - set(acked)
    expected = set(range(count)) - set(acked) - uncertain
    rest: list[Message] = []
    async with backend.messages(topic, sub, pull_max_messages=100) as consumer:
        # Leases of the closed stream lapse on the emulator after one stream deadline (10 s)
        # usually, after several on a loaded machine (once more than 60 s in a full run).
        # Wait up to three minutes for them; anything still missing then is reported as lost.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(180):
                while not expected <= {int(m.data) for m in rest}:
                    message = await consumer.next_message()
                    await message.ack()
                    rest.append(message)
        rest += await drain(consumer, 3.0)
    again = Counter(int(m.data) for m in rest)
    assert set(again).isdisjoint(acked), "a handled and acked message was delivered again"
    assert set(again) | set(acked) | uncertain == set(range(count)), "messages were lost"
    assert interrupted - uncertain <= set(again), "a message whose handler was interrupted was not nacked"
    assert max(again.values()) == 1


async def test_batched_receiver_and_close_stops_receive(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    count = 95
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(count)))
    sizes: list[int] = []
    seen: set[int] = set()
    everything = asyncio.Event()

    async def handler(batch: list[Message]) -> None:
        sizes.append(len(batch))
        await broker.ack_all(batch)
        seen.update(int(m.data) for m in batch)
        if len(seen) == count:
            everything.set()

    receiver = backend.batched_receiver(topic, sub, batch_size=10, batch_timeout=0.2, concurrency=2)
    task = await run_receiver(receiver, handler, batched=True)
    await until(everything, "all batches")
    assert seen == set(range(count)) and max(sizes) <= 10
    async with asyncio.timeout(PATIENCE):
        await receiver.close()
        await task  # close() makes receive_batch() return
    with pytest.raises(ClosedError):
        await receiver.receive_batch(handler)


async def test_backend_close_never_hangs_with_consumers_busy(pubsub_emulator: ProcessServer) -> None:
    backend = await connect(pubsub_emulator)
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    blocked = asyncio.Event()

    async def handler(message: Message) -> None:
        blocked.set()
        await asyncio.sleep(3600)

    task = await run_receiver(backend.receiver(topic, sub), handler)
    waiting = asyncio.ensure_future(backend.messages(name("idle"), name("sub")).next_message())
    await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    await until(blocked, "the handler to start")
    started = time.monotonic()
    async with asyncio.timeout(PATIENCE):
        await backend.close()
        await task
        with pytest.raises(ClosedError):
            await waiting
    assert time.monotonic() - started < 10


async def test_stop_drains_running_handlers_then_returns(backend: PubsubBackend) -> None:
    """``stop()`` (what ``broker.run`` calls on SIGTERM): running handlers finish and ack, no new one
    starts, and ``receive()`` returns by itself; a handler slower than the drain is cut off unacked."""
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(40)))
    started: list[int] = []
    acked: list[int] = []
    four = asyncio.Event()

    async def handler(message: Message) -> None:
        value = int(message.data)
        started.append(value)
        if len(started) >= 4:
            four.set()
        await asyncio.sleep(60 if value == started[0] else 0.5)  # the first outlasts the drain
        await message.ack()
        acked.append(value)

    receiver = backend.receiver(topic, sub, concurrency=4, drain_timeout=3.0)
    task = await run_receiver(receiver, handler)
    await until(four, "four running handlers")
    at_stop = list(started)
    receiver.stop()
    async with asyncio.timeout(PATIENCE):
        await task  # returns by itself: no cancellation needed
    assert receiver.stopped
    assert started == at_stop, "a handler started after stop()"
    assert sorted(acked) == sorted(at_stop[1:]), "running handlers did not finish within the drain"
    assert at_stop[0] not in acked


async def test_close_waits_for_the_drain_of_a_receive_cancelled_while_it_drains(
    backend: PubsubBackend,
) -> None:
    """A receive() cancelled during its drain still lets its running handlers finish and nacks what
    it held; close() returns only then (before, it returned at once and the backend closed the
    clients the nacks go through under them)."""
    topic, sub = name("topic"), name("sub")
    await backend.ensure_subscription(topic, sub)
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(10)))
    started: list[int] = []
    finished: list[int] = []
    two = asyncio.Event()

    async def handler(message: Message) -> None:
        started.append(int(message.data))
        if len(started) == 2:
            two.set()
        await asyncio.sleep(1.0)
        await message.ack()
        finished.append(int(message.data))

    receiver = backend.receiver(topic, sub, concurrency=2)
    task = await run_receiver(receiver, handler)
    await until(two, "two handlers running")
    receiver.stop(drain_timeout=10)
    await asyncio.sleep(0.05)
    await stop(task)  # cancelled while it drains
    async with asyncio.timeout(PATIENCE):
        await receiver.close()
    assert sorted(finished) == sorted(started[:2]), "the running handlers finished before close() returned"
    pending = [t for t in asyncio.all_tasks() if "_shutdown" in getattr(t.get_coro(), "__qualname__", "")]
    assert not pending, "the receiver's shutdown still ran after close() returned"
