"""Interop with Service Bus services that do not use polybroker (azure-servicebus on one side), both ways,
against the FAKE server.

The wire places are the ones docs/interop.md lists: the payload is the body, the key the partition
key (or the session id), attributes are application properties, ``content-type`` the AMQP property.
"""

from __future__ import annotations

import uuid

from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

import broker
from broker import OutboundMessage
from tests.servicebus_fake import FakeServiceBus

PATIENCE = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


async def test_raw_servicebus_producer_to_polybroker_consumer(fake_servicebus: FakeServiceBus) -> None:
    queue = _name("interop-in")
    fake_servicebus.create_queue(queue)
    raw = ServiceBusMessage(
        b"\x00raw-body",
        application_properties={"tenant": "acme", "trace": "t-1"},
        partition_key="order-7",
        content_type="application/json",
        message_id="raw-id-1",
    )
    async with ServiceBusClient.from_connection_string(fake_servicebus.connection_string) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages(raw)
    async with broker.connect(fake_servicebus.settings) as backend, backend.messages(queue, "") as consumer:
        message = await consumer.next_message(timeout=PATIENCE)
        await message.ack()
    assert message.data == b"\x00raw-body"
    assert message.key == "order-7"
    assert dict(message.attributes) == {"tenant": "acme", "trace": "t-1", "content-type": "application/json"}
    assert message.id == "raw-id-1"


async def test_polybroker_producer_to_raw_servicebus_consumer(fake_servicebus: FakeServiceBus) -> None:
    queue = _name("interop-out")
    fake_servicebus.create_queue(queue)
    sent = OutboundMessage(
        b"\x00poly-body", key="order-7", attributes={"tenant": "acme", "content-type": "text/plain"}
    )
    async with broker.connect(fake_servicebus.settings) as backend:
        await backend.publisher().topic(queue).publish(sent)
    async with ServiceBusClient.from_connection_string(fake_servicebus.connection_string) as client:
        async with client.get_queue_receiver(queue) as receiver:
            (received,) = await receiver.receive_messages(max_message_count=1, max_wait_time=PATIENCE)
            await receiver.complete_message(received)
    assert b"".join(received.body) == b"\x00poly-body"
    assert received.partition_key == "order-7"
    assert received.session_id is None
    assert received.application_properties == {b"tenant": b"acme"}  # the SDK hands strings over as bytes
    assert received.content_type == "text/plain"
    assert uuid.UUID(str(received.message_id))  # the SDK's, unless the MessageId attribute sets it
