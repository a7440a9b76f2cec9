"""SQS/SNS delivery rules against the moto fake: size limits, batches that AWS splits or refuses in
part, native dead-lettering (redrive), FIFO groups and de-duplication, whole seconds."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Sequence

import pytest

import broker
from broker import OutboundMessage
from broker.backends.sqs.backend import BatchPublishError, SqsBackend
from broker.backends.sqs.settings import MAX_PAYLOAD_BYTES, MAX_SNS_BYTES
from broker.driver.devserver import ProcessServer
from broker.driver.publishing import Send
from broker.errors import ConfigError, ConnectionFailed, MessageTooLarge
from broker.publish_retry import retrying_publish
from broker.testing import collect, drain
from tests.integration.sqs.test_backend import raw_client


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _connect(server: ProcessServer, query: str = "") -> SqsBackend:
    backend = broker.connect(f"{server.url}&wait_time=1{query}")
    assert isinstance(backend, SqsBackend)
    return backend


async def test_queue_mode_takes_the_queue_size_limit(moto_server_fake: ProcessServer) -> None:
    """A queue's ``MaximumMessageSize`` is the limit, read at the first publish: a small queue
    refuses a message before it is sent, a 1 MiB queue takes more than SNS's 256 KiB."""
    small, large = _name("small"), _name("large")
    async with raw_client(moto_server_fake, "sqs") as sqs:
        url = (await sqs.create_queue(QueueName=small, Attributes={"MaximumMessageSize": "1024"}))["QueueUrl"]
        async with _connect(moto_server_fake, "&mode=queue") as backend:
            assert (backend.capabilities.max_message_bytes or 0) > MAX_SNS_BYTES
            publisher = backend.publisher()
            with pytest.raises(MessageTooLarge, match="1024"):
                await publisher.topic(small).publish(OutboundMessage(b"x" * 1500))
            await publisher.topic(small).publish(OutboundMessage(b"y" * 500))
            big = b"z" * (400 * 1024)
            async with backend.messages(large, "s") as consumer:
                await publisher.topic(large).publish(OutboundMessage(big))
                (got,) = await collect(consumer, 1, 20.0)
            assert got.data == big
        answer = await sqs.receive_message(QueueUrl=url, MaxNumberOfMessages=10, WaitTimeSeconds=1)
    assert [m["Body"] for m in answer.get("Messages", [])] == ["y" * 500]


async def test_sns_mode_refuses_past_256_kib_before_sending(sns_backend: SqsBackend) -> None:
    assert sns_backend.capabilities.max_message_bytes == MAX_PAYLOAD_BYTES
    topic = _name("sns-limit")
    async with sns_backend.messages(topic, "s") as consumer:
        publisher = sns_backend.publisher().topic(topic)
        with pytest.raises(MessageTooLarge, match=str(MAX_SNS_BYTES)):
            await publisher.batch_publish(OutboundMessage(b"a"), OutboundMessage(b"b" * (MAX_SNS_BYTES + 1)))
        await publisher.publish(OutboundMessage(b"c" * (MAX_SNS_BYTES - 100)))
        got = await collect(consumer, 1, 20.0)
        extra = await drain(consumer, 1.0)
    assert [len(m.data) for m in got + extra] == [MAX_SNS_BYTES - 100]  # nothing of the refused batch


async def test_a_batch_is_split_by_aggregate_size(moto_server_fake: ProcessServer) -> None:
    """Ten messages of 200 KiB are more than one ``SendMessageBatch`` takes (1 MiB): every one arrives."""
    topic = _name("split")
    async with _connect(moto_server_fake, "&mode=queue") as backend:
        async with backend.messages(topic, "s") as consumer:
            sent = [OutboundMessage(bytes([65 + i]) * (200 * 1024)) for i in range(10)]
            await backend.publisher().topic(topic).batch_publish(*sent)
            got = await collect(consumer, 10, 30.0)
    assert sorted(m.data for m in got) == sorted(m.data for m in sent)


async def test_failed_batch_entries_are_a_publish_error_with_their_indices(
    moto_server_fake: ProcessServer,
) -> None:
    """The fake refuses one entry of ten (a ``DelaySeconds`` past 15 minutes; no message
    polybroker builds is refused entry by entry, so the entry is changed on the wire): the nine
    others arrive, and the error names index 3."""
    topic = _name("partial")
    async with _connect(moto_server_fake, "&mode=queue") as backend:
        driver = backend._driver()
        async with backend.messages(topic, "s") as consumer:
            built = [driver.entry(OutboundMessage(f"m{i}".encode()), i) for i in range(10)]
            built[3][0]["DelaySeconds"] = 901
            target, _ = await backend.connection.target(topic)
            with pytest.raises(BatchPublishError) as caught:
                await driver.send_entries(topic, target, built)
            got = await collect(consumer, 9, 20.0)
            extra = await drain(consumer, 1.0)
    assert isinstance(caught.value, broker.errors.PublishError)
    assert caught.value.failed == (3,)
    assert caught.value.codes == ("InvalidParameterValue",)
    assert sorted(m.data for m in got + extra) == sorted(f"m{i}".encode() for i in range(10) if i != 3)


async def test_native_redrive_dead_letters_after_max_attempts(moto_server_fake: ProcessServer) -> None:
    """Queue mode, ``provision=create``: the queue gets a ``RedrivePolicy`` and SQS itself moves a
    message received ``max_attempts`` times to the dead-letter queue."""
    topic, dlq = _name("redrive"), _name("dlq")
    async with _connect(moto_server_fake, "&mode=queue") as backend:
        async with backend.messages(topic, "s", max_attempts=2, dead_letter_topic=dlq) as consumer:
            await backend.publisher().topic(topic).publish(OutboundMessage(b"poison", attributes={"a": "1"}))
            for attempt in (1, 2):
                message = await consumer.next_message(timeout=20.0)
                assert message.delivery_attempt == attempt
                await message.nack()
            assert await drain(consumer, 1.5) == []
        async with raw_client(moto_server_fake, "sqs") as sqs:
            url = (await sqs.get_queue_url(QueueName=topic))["QueueUrl"]
            got = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["RedrivePolicy"])
        policy = json.loads(got["Attributes"]["RedrivePolicy"])
        assert policy["deadLetterTargetArn"].endswith(f":{dlq}")
        assert int(policy["maxReceiveCount"]) == 2
        async with backend.messages(dlq, "s") as letters:
            (letter,) = await collect(letters, 1, 20.0)
    assert (letter.data, letter.attributes) == (b"poison", {"a": "1"})


async def test_fifo_keeps_per_key_order_and_a_fixed_group_without_key(
    moto_server_fake: ProcessServer,
) -> None:
    topic = _name("order")
    keys = ["k0", "k1", "k2", None]
    sent = [OutboundMessage(f"{k}:{i}".encode(), key=k) for i in range(8) for k in keys]
    async with _connect(moto_server_fake, "&fifo=true") as backend:
        async with backend.messages(topic, "s") as consumer:
            await backend.publisher().topic(topic).batch_publish(*sent)
            got = await collect(consumer, len(sent), 30.0)
            extra = await drain(consumer, 1.0)
    assert extra == []
    for key in keys:
        assert [m.data for m in got if m.key == key] == [m.data for m in sent if m.key == key]
    assert all(m.raw["Attributes"]["MessageGroupId"] == "polybroker-default" for m in got if m.key is None)


async def test_fifo_retried_publish_is_stored_once(moto_server_fake: ProcessServer) -> None:
    """A publish whose answer is lost is sent again by ``retrying_publish``: the same message
    carries the same deduplication id, so it arrives once."""
    topic = _name("dedup")
    lost: list[int] = []

    async def answer_lost_once(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
        await send(messages)
        if not lost:
            lost.append(len(messages))
            raise ConnectionFailed("the answer was lost")

    async with _connect(moto_server_fake, "&fifo=true&mode=queue") as backend:
        async with backend.messages(topic, "s") as consumer:
            publisher = backend.publisher()
            publisher.wrap_send(retrying_publish(max_attempts=3))
            publisher.wrap_send(answer_lost_once)
            handle = publisher.topic(topic)
            await handle.batch_publish(OutboundMessage(b"once", key="k"), OutboundMessage(b"two"))
            await handle.publish(OutboundMessage(b"once", key="k", attributes={"n": "2"}))
            got = await collect(consumer, 3, 20.0)
            extra = await drain(consumer, 1.0)
    assert lost == [2]
    assert sorted(m.data for m in got + extra) == [b"once", b"once", b"two"]  # the second differs in "n"


async def test_times_are_whole_seconds_rounded_up(sns_backend: SqsBackend) -> None:
    """A 0.2 s nack delay hides the message for 1 s; past 12 hours is a ConfigError."""
    topic = _name("seconds")
    with pytest.raises(ConfigError, match="43200"):
        sns_backend.messages(topic, "s", ack_deadline=43200.5)
    async with sns_backend.messages(topic, "s", ack_deadline=0.2) as consumer:
        await sns_backend.publisher().topic(topic).publish(OutboundMessage(b"later"))
        first = await consumer.next_message(timeout=20.0)
        with pytest.raises(ConfigError, match="43200"):
            await first.nack(delay=43201)
        await first.nack(delay=0.2)
        nacked = time.monotonic()
        again = await consumer.next_message(timeout=20.0)
        await again.ack()
    assert again.data == b"later" and again.delivery_attempt == 2
    assert time.monotonic() - nacked >= 0.9
