"""Typed message properties on Service Bus (against the FAKE server): application properties keep
the types AMQP gave them (broker.typed.native_properties)."""

from __future__ import annotations

import datetime
import uuid

import pytest
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient

import broker
from broker import typed
from broker.errors import NotSupported
from broker.message import OutboundMessage
from tests.servicebus_fake import FakeServiceBus


async def test_application_properties_keep_their_types(fake_servicebus: FakeServiceBus) -> None:
    queue = f"native-{uuid.uuid4().hex[:8]}"
    stamp = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
    properties = {"count": 5, "flag": True, "ratio": 1.5, "when": stamp, "name": "a"}
    async with broker.connect(fake_servicebus.settings) as backend:
        async with backend.messages(queue, "") as consumer:  # makes the queue
            sdk = ServiceBusClient.from_connection_string(fake_servicebus.connection_string, retry_total=0)
            async with sdk, sdk.get_queue_sender(queue) as sender:
                await sender.send_messages(ServiceBusMessage(b"x", application_properties=properties))  # type: ignore[arg-type]
            message = await consumer.next_message(timeout=10)
            await message.ack()
    native = typed.native_properties(message)
    assert native["count"] == 5 and isinstance(native["count"], int)
    assert native["flag"] is True
    assert native["ratio"] == 1.5
    # The SDK's AMQP decoder gives a timestamp property as milliseconds since the epoch.
    assert native["when"] == int(stamp.timestamp() * 1000)
    assert native["name"] == "a"
    # The portable attributes beside them stay str -> str.
    assert message.attributes["count"] == "5" and message.attributes["flag"] == "True"


async def test_an_in_memory_message_has_no_native_properties() -> None:
    async with broker.connect(f"inmem://native-{uuid.uuid4().hex}") as backend:
        async with backend.messages("t", "s") as consumer:
            await backend.publisher().topic("t").publish(OutboundMessage(b"x", attributes={"a": "1"}))
            message = await consumer.next_message(timeout=5)
            await message.ack()
    with pytest.raises(NotSupported):
        typed.native_properties(message)
