"""The schema-evolution scenario the backend tests run: v1 and v2 writers, v1 and v2 readers.

Two versions of ``Order`` (Avro: v2 adds a field with a default; Protobuf: v2 adds a field) are
published to one topic, so its subject holds two schema versions (two ids). Every message is read
back with the v1 reader and the v2 reader: Avro resolves each writer schema to the reader's
(v1 drops ``note``, v2 fills its default), Protobuf parses into the reader's class.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest

pytest.importorskip("confluent_kafka.schema_registry")

from broker import schemas, typed
from tests.unit.schemas.protos import V1, V2
from tests.unit.schemas.support import ORDER_V1, ORDER_V2, mock_registry

__all__ = ["FORMATS", "Scenario", "scenario"]

FORMATS = ["avro", "protobuf"]


class Scenario:
    """Bindings and values of one format, and the checks of what was read."""

    def __init__(self, fmt: str) -> None:
        _, registry = mock_registry()
        self.format = fmt
        self.topic = f"evolution-{fmt}-{uuid.uuid4().hex[:8]}"
        if fmt == "avro":
            self.v1 = schemas.avro(registry, ORDER_V1)
            self.v2 = schemas.avro(registry, ORDER_V2)
            self.values = [{"id": 1, "item": "a", "qty": 1}, {"id": 2, "item": "b", "qty": 2, "note": "gift"}]
        else:
            self.v1 = schemas.protobuf(registry, V1["Order"])
            self.v2 = schemas.protobuf(registry, V2["Order"])
            self.values = [V1["Order"](id=1, customer="a"), V2["Order"](id=2, customer="b", note="gift")]

    async def publish(self, publisher: Any) -> None:
        """The v1 value with the v1 writer, then the v2 value with the v2 writer."""
        await schemas.topic(publisher, self.topic, self.v1).publish(self.values[0], key="k")
        await schemas.topic(publisher, self.topic, self.v2).publish(self.values[1], key="k")

    async def check(self, received: list[Any], tag: Callable[[Any, Any], Any]) -> None:
        """Both readers read both messages (in publish order), each in its own version's shape."""
        assert len(received) == 2
        payloads = [item.value if hasattr(item, "value") else item.data for item in received]
        assert payloads[0][1:5] != payloads[1][1:5]  # two versions of the subject: two schema ids
        as_v1, as_v2 = [], []
        for reader, out in ((self.v1, as_v1), (self.v2, as_v2)):
            await reader.resolve(received)
            out.extend(tag(item, reader).decoded for item in received)
        if self.format == "avro":
            assert as_v1 == [{"id": 1, "item": "a", "qty": 1}, {"id": 2, "item": "b", "qty": 2}]
            assert as_v2 == [{"id": 1, "item": "a", "qty": 1, "note": "none"}, self.values[1]]
        else:
            assert [(m.id, m.customer) for m in as_v1] == [(1, "a"), (2, "b")]
            assert [(m.id, m.customer, m.note) for m in as_v2] == [(1, "a", ""), (2, "b", "gift")]


def scenario(fmt: str) -> Scenario:
    """A new scenario of ``fmt`` (its own registry and topic)."""
    return Scenario(fmt)


tag_message = typed.tag_message
tag_record = typed.tag_record
