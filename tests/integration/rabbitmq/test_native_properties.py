"""Typed message properties on RabbitMQ: headers keep the types AMQP gave them
(``broker.typed.native_properties``)."""

from __future__ import annotations

import datetime
import decimal
import uuid

import aio_pika

from broker import typed
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.backends.rabbitmq.backend import RabbitmqBackend
from broker.message import OutboundMessage


async def test_headers_of_another_client_keep_their_types(
    backend: RabbitmqBackend, rabbitmq_server: RabbitmqDevServer
) -> None:
    topic, sub = f"native-{uuid.uuid4().hex[:8]}", "sub"
    stamp = datetime.datetime(2026, 11, 27, 12, 0, tzinfo=datetime.UTC)
    headers = {
        "count": 5,
        "flag": True,
        "ratio": 1.5,
        "when": stamp,
        "price": decimal.Decimal("9.50"),
        "name": "a",
    }
    async with backend.messages(topic, sub) as consumer:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{rabbitmq_server.port}/")
        async with connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(topic)
            await exchange.publish(aio_pika.Message(b"x", headers=headers), routing_key="")
        message = await consumer.next_message(timeout=10)
        await message.ack()
    properties = typed.native_properties(message)
    assert properties["count"] == 5 and isinstance(properties["count"], int)
    assert properties["flag"] is True
    assert properties["ratio"] == 1.5
    assert properties["price"] == decimal.Decimal("9.50")
    assert properties["when"].replace(tzinfo=datetime.UTC) == stamp
    assert properties["name"] == "a"
    # Portable attributes stay str -> str: text headers only (the others are only here).
    assert dict(message.attributes) == {"name": "a"}


async def test_our_own_attributes_come_back_as_text_and_our_headers_are_left_out(
    backend: RabbitmqBackend,
) -> None:
    topic, sub = f"native-{uuid.uuid4().hex[:8]}", "sub"
    attributes = {"plain": "1", "x-needs-encoding": "yes", "content-type": "application/json"}
    async with backend.messages(topic, sub) as consumer:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"{}", key="k", attributes=attributes))
        message = await consumer.next_message(timeout=10)
        await message.ack()
    properties = typed.native_properties(message)
    assert properties["plain"] == "1" and properties["x-needs-encoding"] == "yes"
    assert not any(name.startswith("Polybroker-") for name in properties)
    assert dict(message.attributes) == attributes
