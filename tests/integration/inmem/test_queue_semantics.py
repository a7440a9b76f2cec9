"""In-memory message-queue semantics beyond the conformance suite."""

from __future__ import annotations

import asyncio
import logging
import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker.adapt import receiver as receiver_of
from broker.backends.inmem import InmemBackend
from broker.errors import AckError, ClosedError, ConfigError, TransactionError
from broker.log import TopicPartition
from broker.message import Message, OutboundMessage
from broker.testing.virtual_time import virtual_time


@pytest.fixture
async def backend() -> AsyncIterator[InmemBackend]:
    b = broker.connect(f"inmem://queue-{uuid.uuid4().hex}")
    assert isinstance(b, InmemBackend)
    async with b:
        yield b


async def test_dead_letters_carry_the_reason_and_attempts(backend: InmemBackend) -> None:
    consumer = backend.messages("jobs", "w", max_attempts=1, dead_letter_topic="jobs.dead")
    dead = backend.messages("jobs.dead", "inspect")
    await backend.publisher().topic("jobs").publish(OutboundMessage(b"bad", key="k", attributes={"a": "1"}))
    message = await consumer.next_message(timeout=1)
    await message.nack()
    letter = await dead.next_message(timeout=1)
    assert letter.data == b"bad" and letter.key == "k"
    assert letter.attributes["a"] == "1"
    assert letter.attributes["delivery_attempts"] == "1"
    assert "nacked" in letter.attributes["dead_letter_reason"]
    poison = OutboundMessage(b"poison")
    await backend.publisher().topic("jobs").publish(poison)
    message = await consumer.next_message(timeout=1)
    await message.dead_letter("unparseable")
    letter = await dead.next_message(timeout=1)
    assert letter.attributes["dead_letter_reason"] == "unparseable"


async def test_expired_deliveries_ignore_stale_acks_and_refuse_in_progress(backend: InmemBackend) -> None:
    consumer = backend.messages("t", "s", ack_deadline=0.1)
    await backend.publisher().topic("t").publish(OutboundMessage(b"x"))
    first = await consumer.next_message(timeout=1)
    second = await consumer.next_message(timeout=1)  # redelivered after 0.1 s
    assert second.delivery_attempt == 2
    with pytest.raises(AckError):
        await first.in_progress()
    with pytest.raises(AckError, match="ack deadline"):
        await first.ack()  # late: sent, but the live delivery stays in flight with its consumer
    await asyncio.sleep(0.15)
    third = await consumer.next_message(timeout=1)
    assert third.delivery_attempt == 3
    await third.ack()


async def test_a_subscription_keeps_its_settings(backend: InmemBackend) -> None:
    backend.messages("t", "s", ack_deadline=5)
    with pytest.raises(ConfigError):
        backend.messages("t", "s", ack_deadline=6)
    with pytest.raises(ConfigError):
        backend.messages("t", "s2", ack_deadline=0)
    with pytest.raises(ConfigError):
        backend.messages("t", "s3", bogus=1)


async def test_start_latest_subscription_sees_only_new_messages(backend: InmemBackend) -> None:
    await backend.publisher().topic("t").publish(OutboundMessage(b"old"))
    consumer = backend.messages("t", "fresh", start="latest")
    await backend.publisher().topic("t").publish(OutboundMessage(b"new"))
    assert (await consumer.next_message(timeout=1)).data == b"new"


async def test_batched_iterator_returns_what_is_ready_at_once(backend: InmemBackend) -> None:
    batches = backend.batched_messages("t", "b", batch_size=4, batch_timeout=30)
    await backend.publisher().topic("t").batch_publish(*(OutboundMessage(bytes([i])) for i in range(6)))
    assert len(await batches.next_batch()) == 4
    assert len(await batches.next_batch()) == 2
    assert await batches.next_batch(timeout=0.05) == []


async def test_closing_the_backend_closes_its_consumers(backend: InmemBackend) -> None:
    consumer = backend.messages("t", "c")
    waiting = asyncio.ensure_future(consumer.next_message())
    await asyncio.sleep(0.05)
    await backend.close()
    with pytest.raises(ClosedError):
        await asyncio.wait_for(waiting, 2)
    with pytest.raises(ClosedError):
        backend.publisher()


async def test_transactions_also_commit_consumer_offsets(backend: InmemBackend) -> None:
    records = backend.records("in", "processor")
    await backend.publisher().topic("in").publish(OutboundMessage(b"1"))
    record = await records.next_record(timeout=1)
    publisher = backend.transactional_publisher()
    with pytest.raises(TransactionError):
        await publisher.topic("out").publish(OutboundMessage(b"outside"))
    await publisher.begin()
    with pytest.raises(TransactionError):
        await publisher.begin()
    await publisher.topic("out").publish(OutboundMessage(b"derived"))
    await publisher.send_offsets("processor", {TopicPartition("in", 0): record.offset + 1})
    log = backend.log()
    tp = TopicPartition("in", 0)
    assert await log.committed("processor", [tp]) == {tp: None}
    assert await publisher.commit()
    assert await log.committed("processor", [tp]) == {tp: 1}
    assert await log.watermarks(TopicPartition("out", 0)) == (0, 1)
    with pytest.raises(TransactionError):
        await publisher.commit()


async def test_batched_records_and_async_for(backend: InmemBackend) -> None:
    await (
        backend.publisher().topic("log").batch_publish(*(OutboundMessage(str(i).encode()) for i in range(5)))
    )
    batches = backend.batched_records("log", "g1", batch_size=2)
    seen = []
    async for batch in batches:
        seen.extend(r.value for r in batch)
        await broker.commit_highest_offsets(batch)
        if len(seen) == 5:
            await batches.close()
    assert seen == [b"0", b"1", b"2", b"3", b"4"]
    records = backend.records("log", "g2")
    got = []
    async for record in records:
        got.append(record.offset)
        if len(got) == 5:
            await records.close()
    assert got == [0, 1, 2, 3, 4]


async def test_immediate_nacks_do_not_starve_new_messages(backend: InmemBackend) -> None:
    """A message nacked at once, again and again, still lets the ones behind it out (one at a time)."""
    consumer = backend.messages("churn", "w")
    topic = backend.publisher().topic("churn")
    for i in range(10):
        await topic.publish(OutboundMessage(str(i).encode()))
    seen: set[bytes] = set()
    for _ in range(500):
        message = await consumer.next_message(timeout=1)
        seen.add(message.data)
        await message.nack()
        if len(seen) == 10:
            break
    assert seen == {str(i).encode() for i in range(10)}


async def test_a_receiver_without_backoff_does_not_starve_new_messages(backend: InmemBackend) -> None:
    """``nack_delay=None``: handlers that always fail get every message within a few seconds."""
    topic = backend.publisher().topic("always-fails")
    for i in range(10):
        await topic.publish(OutboundMessage(str(i).encode()))
    calls: dict[bytes, int] = {}
    all_seen = asyncio.Event()

    async def handler(message: Message) -> None:
        calls[message.data] = calls.get(message.data, 0) + 1
        if len(calls) == 10:
            all_seen.set()
        raise RuntimeError("always fails")

    receiver = receiver_of(backend.messages("always-fails", "w"), concurrency=2, nack_delay=None)
    task = asyncio.create_task(receiver.receive(handler))
    try:
        await asyncio.wait_for(all_seen.wait(), 3)
    except TimeoutError:
        pass  # the assertion below names what never arrived
    finally:
        receiver.stop(drain_timeout=1)
        await asyncio.wait_for(task, 5)
    assert len(calls) == 10, f"messages never handed to the handler: {sorted(calls)}"


async def test_an_ack_after_the_deadline_takes_the_message_out_of_redelivery() -> None:
    """What a broker does with an ack that comes after the deadline, before it redelivered the
    message: the ack is sent and settles it (the backlog drops to 0, nothing comes back), and the
    client, whose clock says the deadline passed, raises AckError naming it."""
    with virtual_time():
        async with broker.connect(f"inmem://late-{uuid.uuid4().hex}?ack_deadline=30") as backend:
            await backend.publisher().topic("t").publish(OutboundMessage(b"slow"))
            async with backend.messages("t", "s") as consumer:
                message = await consumer.next_message(timeout=1)
                await asyncio.sleep(31)  # the handler takes longer than the deadline
                assert await backend.backlog("t", "s") == 1  # waits for redelivery
                with pytest.raises(AckError, match="acked 1s after its ack deadline of 30s"):
                    await message.ack()
                assert message.state == "acked"
                assert await backend.backlog("t", "s") == 0
                with pytest.raises(broker.errors.Timeout):
                    await consumer.next_message(timeout=120)


async def test_a_handler_that_never_settles_is_warned_about_once_per_message(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Redeliveries of a message the handler left unsettled log no new warning; warnings about
    many messages are rate-limited (those left out are counted in the next one)."""
    caplog.set_level(logging.WARNING, logger="broker.settle")
    with virtual_time():
        async with broker.connect(f"inmem://unsettled-{uuid.uuid4().hex}?ack_deadline=30") as backend:
            calls: list[str] = []

            async def handle(message: Message) -> None:
                calls.append(message.id)

            topic = backend.publisher().topic("t")
            await topic.publish(OutboundMessage(b"first"))
            task = asyncio.ensure_future(backend.receiver("t", "s").receive(handle))
            await asyncio.sleep(100)  # delivered at 0 s, redelivered at 30, 60 and 90 s: 1 warning
            assert len(calls) == 4 and len(set(calls)) == 1
            await topic.batch_publish(*(OutboundMessage(str(i).encode()) for i in range(15)))
            await asyncio.sleep(1)  # 15 more within a minute: 10 warnings, 5 left out
            assert len(set(calls)) == 16
            await asyncio.sleep(60)
            await topic.publish(OutboundMessage(b"last"))  # the next minute: counts the 5
            await asyncio.sleep(1)
            assert len(set(calls)) == 17
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    texts = [r.getMessage() for r in caplog.records if r.name == "broker.settle"]
    assert len(texts) == 12, texts
    assert all(f"{handle.__qualname__} returned without settling message" in t for t in texts), texts
    assert "(5 more messages left unsettled were not logged)" in texts[-1]
    assert "not logged" not in "".join(texts[:-1])
