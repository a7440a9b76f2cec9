"""The stream processor with registry-framed values: an input stream, a group table and an output.

Codecs come from ``broker.typed.binding_codec`` over ``broker.schemas`` bindings (a
``SchemaBinding`` is a ``Codec`` as it is, too). Run with the processor's ``Tester`` (in memory).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from broker import schemas
from broker.backends.kafka.processor import Context, Tester, define_group, input, output, persist
from tests.unit.schemas.protos import V1
from tests.unit.schemas.support import ORDER_V1, mock_registry

typed_codec = pytest.importorskip("broker.typed.codec")

TOTAL = json.dumps(
    {"type": "record", "name": "Total", "namespace": "shop", "fields": [{"name": "qty", "type": "long"}]}
)


async def test_stream_table_and_output_with_registry_framed_values() -> None:
    client, registry = mock_registry()
    orders = typed_codec.binding_codec(schemas.avro(registry, ORDER_V1, topic="orders"))
    totals = typed_codec.binding_codec(schemas.avro(registry, TOTAL, subject_strategy="record"))
    audits = schemas.protobuf(registry, V1["Audit"], topic="audits")  # a SchemaBinding is a Codec too

    def on_order(ctx: Context, order: Any) -> None:
        total = ctx.value() or {"qty": 0}
        ctx.set_value({"qty": total["qty"] + order["qty"]})
        ctx.emit("audits", ctx.key, V1["Audit"](who=f"{ctx.key}:{order['id']}"))

    graph = define_group(
        "billing", input("orders", orders, on_order), persist(totals), output("audits", audits)
    )
    async with Tester() as tester:
        await tester.processor(graph)
        tracker = await tester.tracker("audits")
        await tester.consume("orders", "alice", {"id": 1, "item": "a", "qty": 2})
        await tester.consume("orders", "alice", {"id": 2, "item": "b", "qty": 3})
        assert tester.table_value("billing-table", "alice") == {"qty": 5}
        assert [(k, v.who) for k, v in await tracker.drain()] == [("alice", "alice:1"), ("alice", "alice:2")]
    # the table's values, the input's and the output's were registry-framed under their subjects
    assert sorted(client.get_subjects()) == ["audits-value", "orders-value", "shop.Total"]
