"""Registry-framed Avro decoded into columns by the broker data source (fastavro in the executors).

Records are written through ``broker.schemas`` with two versions of the schema (an in-process
``mock://`` registry); the executors look the writer schemas up over HTTP in a registry STUB
(tests/schema_registry_stub.py) answering the two ids, and read both into the v2 reader schema.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker import schemas
from broker.driver.devserver import ProcessServer
from tests.schema_registry_stub import registry_stub
from tests.spark.support import kafka_backend, kafka_options, unique
from tests.unit.schemas.support import ORDER_V1, ORDER_V2, mock_registry

pytestmark = pytest.mark.timeout(180)


async def _publish(url: str, topic: str) -> None:
    _, registry = mock_registry()
    async with kafka_backend(url) as backend:
        await backend.log().create_topic(topic, 1)
        publisher = backend.publisher()
        await schemas.topic(publisher, topic, schemas.avro(registry, ORDER_V1)).publish(
            {"id": 1, "item": "a", "qty": 1}
        )
        await schemas.topic(publisher, topic, schemas.avro(registry, ORDER_V2)).publish(
            {"id": 2, "item": "b", "qty": 2, "note": "gift"}
        )


def test_batch_read_decodes_registry_framed_avro_into_columns(spark: Any, tansu: ProcessServer) -> None:
    topic = unique("avro")
    asyncio.run(_publish(tansu.url, topic))
    with registry_stub() as stub:
        stub.responses[("GET", "/schemas/ids/1")] = (200, {"schema": ORDER_V1})
        stub.responses[("GET", "/schemas/ids/2")] = (200, {"schema": ORDER_V2})
        frame = (
            spark.read.format("broker")
            .options(**kafka_options(tansu.url))
            .option("topic", topic)
            .option("valueFormat", "avro")
            .option("avroSchema", ORDER_V2)
            .option("avroColumnPrefix", "order_")
            .option("schemaRegistryUrl", stub.url)
            .load()
        )
        assert frame.schema["order_qty"].dataType.simpleString() == "int"
        columns = ["order_id", "order_item", "order_qty", "order_note"]
        rows = sorted(frame.select(*columns, "value").collect(), key=lambda r: r["order_id"])
    assert [tuple(r[c] for c in columns) for r in rows] == [(1, "a", 1, "none"), (2, "b", 2, "gift")]
    assert bytes(rows[0]["value"])[:5] == b"\x00\x00\x00\x00\x01"  # the raw value stays
