"""CloudEvents on Service Bus through the azure-servicebus SDK itself (against the FAKE server).

The conformance suite publishes the reference SDK's AMQP messages through our portable,
``str -> str`` attributes. Here the other AMQP client's messages go on the wire as the
``cloudevents`` SDK's AMQP binding makes them: ``time`` as an integer of milliseconds, native
booleans and integers, the ``cloudEvents:`` prefix too; and what we publish is read back with
azure-servicebus and parsed by the SDK's binding from the AMQP message as it arrived.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from cloudevents.core.bindings import amqp
from cloudevents.core.formats.json import JSONFormat
from cloudevents.core.v1.event import CloudEvent as SdkEvent

import broker
from broker import typed
from broker.typed import cloudevents
from tests.servicebus_fake import FakeServiceBus

TIME = datetime(2026, 11, 27, 12, 30, 15, 250000, tzinfo=UTC)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServiceBus]:
    with FakeServiceBus(auto_create=False) as server:
        yield server


def sdk_event(event_id: str) -> SdkEvent:
    attributes: dict[str, Any] = {
        "id": event_id,
        "source": "/sensors/7",
        "type": "com.example.reading",
        "time": TIME,
        "subject": "room 1",
        "datacontenttype": "application/json",
        "tenant": "acme",
        "sequence": 7,
        "urgent": True,
    }
    return SdkEvent(attributes, {"sensor": "s-7", "celsius": 21.5})


def _text(value: Any) -> Any:
    return value.decode() if isinstance(value, bytes) else value


async def test_cloudevents_amqp_messages_of_another_client_both_ways(fake: FakeServiceBus) -> None:
    queue = f"ce-{uuid.uuid4().hex[:8]}"
    underscore, colon, structured = sdk_event("amqp-1"), sdk_event("amqp-2"), sdk_event("amqp-3")
    colon_message = amqp.to_binary(colon, JSONFormat())
    sent = [
        (underscore, amqp.to_binary(underscore, JSONFormat()).application_properties),
        (
            colon,
            {
                k.replace("cloudEvents_", "cloudEvents:"): v
                for k, v in colon_message.application_properties.items()
            },
        ),
    ]
    assert sent[0][1]["cloudEvents_time"] == int(TIME.timestamp() * 1000)  # the SDK writes milliseconds
    for _, properties in sent:
        # ... meaning an AMQP timestamp, which azure-servicebus writes for a datetime (a bare int of
        # this size it refuses); received, the AMQP timestamp is milliseconds again.
        name = next(k for k in properties if k.endswith("time"))
        properties[name] = datetime.fromtimestamp(properties[name] / 1000, UTC)
    bound = cloudevents.binding(dict, protocol="servicebus")
    ours = cloudevents.CloudEvent("com.example.reading", "/ours", {"n": 1}, id="ours-1", time=TIME)
    async with broker.connect(fake.settings) as backend:
        async with typed.messages(backend.messages(queue, ""), bound) as consumer:  # makes the queue
            sdk = ServiceBusClient.from_connection_string(fake.connection_string, retry_total=0)
            async with sdk, sdk.get_queue_sender(queue) as sender:
                for sdk_sent, properties in sent:
                    body = amqp.to_binary(sdk_sent, JSONFormat()).application_data
                    await sender.send_messages(
                        ServiceBusMessage(
                            body,
                            application_properties=properties,  # type: ignore[arg-type]
                            content_type="application/json",
                        )
                    )
                structured_message = amqp.to_structured(structured, JSONFormat())
                content_type = structured_message.properties["content-type"]
                await sender.send_messages(
                    ServiceBusMessage(structured_message.application_data, content_type=content_type)
                )
            received: dict[str, cloudevents.CloudEvent[dict[str, Any]]] = {}
            for _ in range(3):
                message = await consumer.next_message(timeout=10)
                await message.ack()
                decoded = message.decoded
                received[decoded.id] = decoded
            await cloudevents.topic(backend.publisher(), queue, dict, protocol=backend).publish(ours)
        for expected in (underscore, colon, structured):
            got = received[expected.get_id()]
            assert got.attributes() == expected.get_attributes()  # int, bool and the ms timestamp kept
            assert got.data == expected.get_data()

        sdk = ServiceBusClient.from_connection_string(fake.connection_string, retry_total=0)
        async with sdk, sdk.get_queue_receiver(queue, max_wait_time=10) as receiver:
            (raw,) = await receiver.receive_messages(max_message_count=1, max_wait_time=10)
            await receiver.complete_message(raw)
    properties = {_text(k): _text(v) for k, v in (raw.application_properties or {}).items()}
    assert properties["cloudEvents_id"] == "ours-1"
    arrived = amqp.AMQPMessage({"content-type": raw.content_type}, properties, b"".join(raw.body))
    parsed = amqp.from_amqp(arrived, JSONFormat())
    assert parsed.get_attributes() == {**ours.attributes(), "datacontenttype": "application/json"}
    assert parsed.get_data() == {"n": 1}
