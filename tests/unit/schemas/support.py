"""Schemas and registries shared by the schema tests."""

from __future__ import annotations

import json
import uuid
from typing import Any

import pytest

sr = pytest.importorskip("confluent_kafka.schema_registry")

from broker import schemas  # noqa: E402

ORDER_V1 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": "int"},
        ],
    }
)
#: v2 adds a field with a default (readable by v1 readers, and v1 data by v2 readers).
ORDER_V2 = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "shop",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "note", "type": "string", "default": "none"},
        ],
    }
)
ORDER_JSON = json.dumps(
    {
        "title": "Order",
        "type": "object",
        "properties": {"id": {"type": "integer"}, "item": {"type": "string"}},
        "required": ["id", "item"],
    }
)
KEY_AVRO = json.dumps(
    {
        "type": "record",
        "name": "OrderKey",
        "namespace": "shop",
        "fields": [{"name": "customer", "type": "string"}],
    }
)


def mock_registry() -> tuple[Any, schemas.Registry]:
    """(confluent-kafka's mock registry client, our Registry over the same client)."""
    client = sr.SchemaRegistryClient.new_client({"url": f"mock://{uuid.uuid4().hex}"})
    return client, schemas.Registry(client=client)


def ctx(topic: str, field: str = "value", headers: Any = None) -> Any:
    """confluent-kafka's SerializationContext."""
    from confluent_kafka.serialization import MessageField, SerializationContext

    kind = MessageField.KEY if field == "key" else MessageField.VALUE
    return SerializationContext(topic, kind, headers)


def strategy(name: str) -> Any:
    """confluent-kafka's subject name strategy function."""
    return {
        "topic": sr.topic_subject_name_strategy,
        "record": sr.record_subject_name_strategy,
        "topic_record": sr.topic_record_subject_name_strategy,
    }[name]
