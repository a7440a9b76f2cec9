"""Registry-framed values and keys on Kafka (a local Tansu): evolution, keys, the GUID header.

What a Kafka consumer built on confluent-kafka's own deserializers reads from our records: the raw
key and header bytes are the ones confluent-kafka's serializers write.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import broker
from broker import schemas
from broker.driver.devserver import ProcessServer
from tests.integration.kafka.support import TEST_QUERY
from tests.integration.schemas.evolution import FORMATS, scenario, tag_record
from tests.unit.schemas.support import KEY_AVRO, ORDER_V1, ctx, mock_registry

avro_mod = pytest.importorskip("confluent_kafka.schema_registry.avro")


async def _records(backend: Any, topic: str, count: int) -> list[Any]:
    out: list[Any] = []
    async with backend.records(topic, f"g-{uuid.uuid4().hex[:8]}") as records, asyncio.timeout(20):
        while len(out) < count:
            out.append(await records.next_record())
    return out


@pytest.mark.parametrize("fmt", FORMATS)
async def test_evolution_on_kafka(tansu_server: ProcessServer, fmt: str) -> None:
    case = scenario(fmt)
    async with broker.connect(f"{tansu_server.url}?{TEST_QUERY}") as backend:
        await backend.admin.create_topic(case.topic, 1)
        await case.publish(backend.publisher())
        received = await _records(backend, case.topic, 2)
    await case.check(received, tag_record)


async def test_framed_keys_and_guid_headers_read_by_confluent_deserializers(
    tansu_server: ProcessServer,
) -> None:
    client, registry = mock_registry()
    value_binding = schemas.avro(registry, ORDER_V1, id_in="header")
    key_binding = schemas.avro(registry, KEY_AVRO, field="key")
    topic = f"keys-{uuid.uuid4().hex[:8]}"
    order, key = {"id": 5, "item": "lamp", "qty": 1}, {"customer": "c-9"}
    async with broker.connect(f"{tansu_server.url}?{TEST_QUERY}") as backend:
        await backend.admin.create_topic(topic, 1)
        handle = schemas.topic(backend.publisher(), topic, value_binding, key=key_binding)
        await handle.publish(order, key=key)
        source = backend.records(topic, f"g-{uuid.uuid4().hex[:8]}")
        async with schemas.records(source, value_binding, key=key_binding) as typed_records:
            record = await typed_records.next_record(timeout=20)
    assert record.decoded == order and schemas.decoded_key(record, key_binding) == key
    raw = record.raw  # the confluent-kafka Message: the bytes as any Kafka client sees them
    headers = raw.headers()
    guid = dict(headers)[schemas.VALUE_SCHEMA_ID]
    assert len(guid) == 17 and guid[0] == 1
    assert avro_mod.AvroDeserializer(client)(raw.value(), ctx(topic, headers=headers)) == order
    assert avro_mod.AvroDeserializer(client)(raw.key(), ctx(topic, "key")) == key
    assert raw.key()[:5] == b"\x00\x00\x00\x00\x02"
