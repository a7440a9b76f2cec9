"""Interop with AMQP services that do not use polybroker: aio-pika on one side, polybroker on the other.

The wire places are the ones docs/interop.md lists: the body is the payload, the key the
``Polybroker-Key`` header, attributes are headers, ``content-type`` the AMQP property.
"""

from __future__ import annotations

import uuid

import aio_pika

from broker.backends.rabbitmq import RabbitmqDevServer
from broker.backends.rabbitmq.backend import RabbitmqBackend
from broker.backends.rabbitmq.mapping import KEY_HEADER
from broker.message import OutboundMessage


async def test_raw_aio_pika_producer_to_polybroker_consumer(
    backend: RabbitmqBackend, rabbitmq_server: RabbitmqDevServer
) -> None:
    topic = f"interop-{uuid.uuid4().hex[:8]}"
    async with backend.messages(topic, "sub") as consumer:
        connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{rabbitmq_server.port}/")
        async with connection:
            channel = await connection.channel()
            exchange = await channel.get_exchange(topic)
            raw = aio_pika.Message(
                b"\x00raw-body",
                headers={KEY_HEADER: "order-7", "tenant": "acme", "trace": "t-1"},
                content_type="application/json",
                message_id="raw-id-1",
            )
            await exchange.publish(raw, routing_key="")
        message = await consumer.next_message(timeout=10)
        await message.ack()
    assert message.data == b"\x00raw-body"
    assert message.key == "order-7"
    assert dict(message.attributes) == {"tenant": "acme", "trace": "t-1", "content-type": "application/json"}
    assert message.id == "raw-id-1"


async def test_polybroker_producer_to_raw_aio_pika_consumer(
    backend: RabbitmqBackend, rabbitmq_server: RabbitmqDevServer
) -> None:
    topic = f"interop-{uuid.uuid4().hex[:8]}"
    connection = await aio_pika.connect(f"amqp://guest:guest@127.0.0.1:{rabbitmq_server.port}/")
    async with connection:
        channel = await connection.channel()
        exchange = await channel.declare_exchange(topic, aio_pika.ExchangeType.FANOUT, durable=True)
        queue = await channel.declare_queue(exclusive=True)
        await queue.bind(exchange)
        sent = OutboundMessage(
            b"\x00poly-body", key="order-7", attributes={"tenant": "acme", "content-type": "text/plain"}
        )
        await backend.publisher().topic(topic).publish(sent)
        incoming = await queue.get(timeout=10)
        await incoming.ack()
    assert incoming.body == b"\x00poly-body"
    assert incoming.headers == {KEY_HEADER: "order-7", "tenant": "acme"}
    assert incoming.content_type == "text/plain"
    assert incoming.routing_key == ""  # the key is the routing key only on topic exchanges
    assert incoming.message_id and len(incoming.message_id) == 32  # a UUID hex per message
    assert incoming.timestamp is not None
