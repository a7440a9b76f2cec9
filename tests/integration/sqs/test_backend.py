"""SQS/SNS backend behaviour against the moto fake: interop with raw aiobotocore each way, queue
mode, provisioning, the queue policy, settings that stay secret."""

from __future__ import annotations

import json
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.backends.sqs.backend import SqsBackend, queue_policy
from broker.backends.sqs.devserver import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY
from broker.driver.devserver import ProcessServer
from broker.errors import AuthenticationFailed, ProvisioningError
from broker.testing import collect
from tests.integration.sqs.server import running_moto_server_fake


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def _endpoint(server: ProcessServer) -> str:
    return f"http://{server.host}:{server.port}"


@asynccontextmanager
async def raw_client(server: ProcessServer, service: str) -> AsyncIterator[Any]:
    """A plain aiobotocore client of the fake: the other side of the interop tests."""
    from aiobotocore.session import get_session

    async with get_session().create_client(
        service,  # type: ignore[call-overload]
        region_name="us-east-1",
        endpoint_url=_endpoint(server),
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
    ) as client:
        yield client


async def test_raw_sns_publish_arrives_with_its_attributes(
    backend: SqsBackend, moto_server_fake: ProcessServer
) -> None:
    topic, sub = _name("interop"), _name("sub")
    async with backend.messages(topic, sub) as consumer:  # makes the topic and the subscribed queue
        async with raw_client(moto_server_fake, "sns") as sns:
            arn = (await sns.create_topic(Name=topic))["TopicArn"]
            await sns.publish(
                TopicArn=arn,
                Message='{"order": 7}',
                MessageAttributes={
                    "content-type": {"DataType": "String", "StringValue": "application/json"},
                    "tenant": {"DataType": "String", "StringValue": "acme"},
                },
            )
        (message,) = await collect(consumer, 1, 10.0)
    assert message.data == b'{"order": 7}'
    assert dict(message.attributes) == {"content-type": "application/json", "tenant": "acme"}
    assert message.key is None and message.delivery_attempt == 1


async def test_polybroker_publish_reads_raw_with_native_attributes(
    backend: SqsBackend, moto_server_fake: ProcessServer
) -> None:
    topic, sub = _name("interop"), _name("sub")
    async with backend.messages(topic, sub):
        pass  # the subscription's queue exists and is subscribed
    await (
        backend.publisher()
        .topic(topic)
        .publish(OutboundMessage(b"hello", key="customer-9", attributes={"tenant": "acme", "empty": ""}))
    )
    async with raw_client(moto_server_fake, "sqs") as sqs:
        url = (await sqs.get_queue_url(QueueName=f"{topic}--{sub}"))["QueueUrl"]
        got = await sqs.receive_message(QueueUrl=url, MessageAttributeNames=["All"], WaitTimeSeconds=2)
    (raw,) = got["Messages"]
    assert raw["Body"] == "hello"  # raw message delivery: no SNS envelope
    attributes = {name: value["StringValue"] for name, value in raw["MessageAttributes"].items()}
    assert attributes == {"tenant": "acme", "pb-key": "customer-9", "empty": "-"}
    assert raw["MessageAttributes"]["empty"]["DataType"] == "String.empty"


async def test_queue_mode_round_trip_binary_and_many_attributes(moto_server_fake: ProcessServer) -> None:
    topic = _name("q")
    many = {f"a{i}": str(i) for i in range(12)}  # more than SQS's 10: they travel packed
    payload = bytes(range(256))
    async with broker.connect(f"{moto_server_fake.url}&wait_time=1&mode=queue") as backend:
        async with backend.messages(topic, "first") as first:
            await (
                backend.publisher()
                .topic(topic)
                .batch_publish(*(OutboundMessage(payload, key=f"k{i}", attributes=many) for i in range(12)))
            )
            got = await collect(first, 6, 10.0)
        # another subscription name consumes the same queue (competing consumers): the rest,
        # including what the first consumer received and released on close
        async with backend.messages(topic, "second") as second:
            got += await collect(second, 6, 10.0)
    assert len(got) == 12 and len({m.id for m in got}) == 12
    assert all(m.data == payload and dict(m.attributes) == many for m in got)
    assert sorted(m.key or "" for m in got) == sorted(f"k{i}" for i in range(12))


async def test_verify_names_what_is_missing_and_creates_nothing(moto_server_fake: ProcessServer) -> None:
    topic = _name("absent")
    async with broker.connect(f"{moto_server_fake.url}&wait_time=1&provision=verify") as backend:
        with pytest.raises(ProvisioningError, match=topic):
            await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    async with raw_client(moto_server_fake, "sns") as sns:
        topics = (await sns.list_topics())["Topics"]
    assert not [t for t in topics if t["TopicArn"].endswith(f":{topic}")]


def test_queue_policy_lets_only_the_topic_send() -> None:
    queue_arn = "arn:aws:sqs:eu-west-1:123456789012:orders--billing"
    topic_arn = "arn:aws:sns:eu-west-1:123456789012:orders"
    policy = json.loads(json.dumps(queue_policy(queue_arn, topic_arn)))
    assert policy["Version"] == "2012-10-17"
    (statement,) = policy["Statement"]
    assert statement["Effect"] == "Allow"
    assert statement["Principal"] == {"Service": "sns.amazonaws.com"}
    assert statement["Action"] == "sqs:SendMessage"
    assert statement["Resource"] == queue_arn
    assert statement["Condition"] == {"ArnEquals": {"aws:SourceArn": topic_arn}}


def test_secret_settings_stay_out_of_repr() -> None:
    backend = broker.connect("sqs://AKIDEXAMPLE:s3cr3t-key@eu-west-1?session_token=t0ken-value")
    assert isinstance(backend, SqsBackend)
    shown = repr(backend) + repr(backend.settings)
    assert "s3cr3t-key" not in shown and "t0ken-value" not in shown
    assert backend.settings.secret_access_key == "s3cr3t-key"


async def test_wrong_keys_are_authentication_failed() -> None:
    """With the fake's IAM checks on, keys it does not know are refused as AWS refuses them."""
    with running_moto_server_fake(iam_checks=True) as server:
        url = server.url.replace(f"{FAKE_ACCESS_KEY_ID}:{FAKE_SECRET_ACCESS_KEY}", "AKIDWRONG:wrong-secret")
        async with broker.connect(url) as backend:
            with pytest.raises(AuthenticationFailed) as raised:
                await backend.ping(timeout=10)
    assert "wrong-secret" not in str(raised.value)
