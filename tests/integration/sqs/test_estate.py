"""An SQS/SNS estate made by others with raw aiobotocore, used under ``provision=none`` and ``verify``.

Queue mode: a queue another service created and filled is consumed by its own name. SNS mode: a
topic, the subscription's queue ``<topic>--<subscription>`` and the raw-delivery subscription
between them, all made with the raw clients, are published to and consumed. Under ``verify`` a
missing queue is a ``ProvisioningError`` naming it, and trying creates nothing.
"""

from __future__ import annotations

import asyncio

import pytest

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.errors import ProvisioningError
from broker.testing import collect
from tests.integration.sqs.test_backend import _name, raw_client

PATIENCE = 10.0


async def test_a_queue_made_and_filled_by_the_raw_client_is_consumed_by_its_name(
    moto_server_fake: ProcessServer,
) -> None:
    queue = _name("their-queue")
    async with asyncio.timeout(4 * PATIENCE), raw_client(moto_server_fake, "sqs") as sqs:
        url = (await sqs.create_queue(QueueName=queue))["QueueUrl"]
        for i in range(3):
            await sqs.send_message(
                QueueUrl=url,
                MessageBody=f"m{i}",
                MessageAttributes={"n": {"DataType": "String", "StringValue": str(i)}},
            )
        async with (
            broker.connect(f"{moto_server_fake.url}&wait_time=1&mode=queue&provision=none") as backend,
            backend.messages(queue, "app") as consumer,
        ):
            got = await collect(consumer, 3, PATIENCE)
        left = await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["ApproximateNumberOfMessages"])
    assert sorted((m.data, m.attributes["n"]) for m in got) == [(f"m{i}".encode(), str(i)) for i in range(3)]
    assert left["Attributes"]["ApproximateNumberOfMessages"] == "0"  # acked: deleted


async def test_an_sns_topic_and_subscribed_queue_made_by_the_raw_clients(
    moto_server_fake: ProcessServer,
) -> None:
    topic, sub = _name("their-topic"), _name("app")
    async with raw_client(moto_server_fake, "sns") as sns, raw_client(moto_server_fake, "sqs") as sqs:
        arn = (await sns.create_topic(Name=topic))["TopicArn"]
        url = (await sqs.create_queue(QueueName=f"{topic}--{sub}"))["QueueUrl"]
        queue_arn = (await sqs.get_queue_attributes(QueueUrl=url, AttributeNames=["QueueArn"]))["Attributes"][
            "QueueArn"
        ]
        await sns.subscribe(
            TopicArn=arn, Protocol="sqs", Endpoint=queue_arn, Attributes={"RawMessageDelivery": "true"}
        )
    async with (
        asyncio.timeout(4 * PATIENCE),
        broker.connect(f"{moto_server_fake.url}&wait_time=1&provision=none") as backend,
    ):
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(f"s{i}".encode()) for i in range(3)))
        )
        async with backend.messages(topic, sub) as consumer:
            got = await collect(consumer, 3, PATIENCE)
    assert sorted(m.data for m in got) == [b"s0", b"s1", b"s2"]


async def test_verify_names_a_missing_queue_and_creates_it_not(moto_server_fake: ProcessServer) -> None:
    queue = _name("absent")
    async with broker.connect(f"{moto_server_fake.url}&wait_time=1&mode=queue&provision=verify") as backend:
        with pytest.raises(ProvisioningError, match=queue) as raised:
            async with backend.messages(queue, "app") as consumer:
                await consumer.next_message(timeout=PATIENCE)
    assert raised.value.missing == (f"queue {queue!r}",)
    async with raw_client(moto_server_fake, "sqs") as sqs:
        listed = await sqs.list_queues(QueueNamePrefix=queue)
    assert not listed.get("QueueUrls")
