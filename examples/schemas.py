"""Confluent Schema Registry formats on any backend: Avro values with evolution, a JSON Schema value.

Runs on the in-memory broker and confluent-kafka's in-memory registry by default; point it at a
real broker and registry with ``--url kafka://127.0.0.1:9092 --registry http://127.0.0.1:8081``.
Needs the ``schemas`` extra (``pip install 'polybroker[schemas]'``).

    python examples/schemas.py

An order is published with v1 of its Avro schema and another with v2 (a new field with a
default); a v1 reader and a v2 reader each read both (Avro's resolution rules), and a payload
whose schema id the registry does not know is set aside as undecodable while the others are read.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import uuid

import broker
from broker import OutboundMessage, schemas
from broker.errors import DecodeError

ORDER_V1 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [{"name": "id", "type": "long"}, {"name": "total", "type": "double"}],
    }
)
ORDER_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "total", "type": "double"},
            {"name": "currency", "type": "string", "default": "EUR"},
        ],
    }
)
REFUND = json.dumps(
    {
        "title": "Refund",
        "type": "object",
        "properties": {"order": {"type": "integer"}, "reason": {"type": "string"}},
        "required": ["order"],
    }
)


async def main(url: str, registry_url: str) -> None:
    """Publish and read the orders and the refund on ``url`` with the registry ``registry_url``."""
    registry = schemas.Registry(registry_url)
    v1, v2 = schemas.avro(registry, ORDER_V1), schemas.avro(registry, ORDER_V2)
    refunds = schemas.json_schema(registry, REFUND)
    topic = f"orders-{uuid.uuid4().hex[:6]}"
    async with broker.connect(url) as backend:
        async with backend.messages(topic, "billing") as source:
            publisher = backend.publisher()
            await schemas.topic(publisher, topic, v1).publish({"id": 1, "total": 9.5}, key="c-1")
            await schemas.topic(publisher, topic, v2).publish(
                {"id": 2, "total": 20.0, "currency": "USD"}, key="c-2"
            )
            await publisher.topic(topic).publish(OutboundMessage(b"\x00\x00\x00\x03\xe7??", key="c-3"))
            consumer = schemas.messages(source, v1)
            for _ in range(3):
                message = await consumer.next_message(timeout=10)
                try:
                    as_v1 = message.decoded
                except DecodeError as error:
                    print(f"undecodable ({message.key}): {type(error.__cause__).__name__}")
                else:
                    await v2.resolve([message])
                    print(f"v1 reader: {as_v1}  v2 reader: {v2.decode(message.data)}")
                await message.ack()
        async with backend.messages(f"{topic}-refunds", "audit") as source:
            await schemas.topic(backend.publisher(), f"{topic}-refunds", refunds).publish(
                {"order": 2, "reason": "late"}
            )
            async with schemas.messages(source, refunds) as consumer:
                message = await consumer.next_message(timeout=10)
                print(f"refund: {message.decoded} ({message.attributes['content-type']})")
                await message.ack()
    registry.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=f"inmem://schemas-{uuid.uuid4().hex[:6]}")
    parser.add_argument("--registry", default="mock://example")
    args = parser.parse_args()
    asyncio.run(main(args.url, args.registry))
