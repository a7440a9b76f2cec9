"""Type bindings in the stream processor through broker.typed.binding_codec: a typed stream, a typed
group table, a typed join, output, emitter and view, and a stream of CloudEvents, on the Tester."""

from __future__ import annotations

import dataclasses
from typing import Any

import msgspec
import pytest

from broker import typed
from broker.backends.kafka.processor import Context, Tester, define_group, input, join, output, persist
from broker.errors import DecodeError
from broker.typed import binding_codec, cloudevents


@dataclasses.dataclass
class Order:
    customer: str
    amount: float


class Total(msgspec.Struct):
    orders: int
    amount: float


@dataclasses.dataclass
class Receipt:
    customer: str
    total: float
    tier: str | None


async def test_typed_stream_table_join_output_emitter_and_view() -> None:
    orders, totals = binding_codec(Order), binding_codec(typed.binding(Total, format="msgpack"))
    tiers, receipts = binding_codec(str), binding_codec(Receipt)
    seen: list[Order] = []

    def on_order(ctx: Context, order: Order) -> None:
        seen.append(order)
        total: Total = ctx.value() or Total(0, 0.0)
        total = Total(total.orders + 1, total.amount + order.amount)
        ctx.set_value(total)
        ctx.emit("receipts", ctx.key, Receipt(order.customer, total.amount, ctx.join("tiers")))

    graph = define_group(
        "billing",
        input("orders", orders, on_order),
        join("tiers", tiers),
        output("receipts", receipts),
        persist(totals),
    )
    async with Tester() as tester:
        await tester.processor(graph)
        await tester.set_table_value("tiers", "alice", "gold")
        view = await tester.view("billing-table", totals)
        track = await tester.tracker("receipts", receipts)
        await tester.consume("orders", "alice", Order("alice", 9.5))
        await tester.emitter("orders", orders).emit_sync("alice", Order("alice", 0.5))
        await tester.settle()
        assert seen == [Order("alice", 9.5), Order("alice", 0.5)]
        assert tester.table_value("billing-table", "alice") == Total(2, 10.0)
        assert view.get("alice") == Total(2, 10.0)
        assert await track.drain() == [
            ("alice", Receipt("alice", 9.5, "gold")),
            ("alice", Receipt("alice", 10.0, "gold")),
        ]


async def test_a_stream_of_cloudevents_in_structured_mode() -> None:
    events = binding_codec(cloudevents.binding(Order, protocol="kafka"))
    got: list[Any] = []
    async with Tester() as tester:
        await tester.processor(define_group("audit", input("events", events, lambda ctx, e: got.append(e))))
        event = cloudevents.CloudEvent("com.example.order", "/shop", Order("bob", 3.0), id="e-1")
        await tester.consume("events", "bob", event)
    assert got == [dataclasses.replace(event, datacontenttype="application/json")]


def test_the_codec_encodes_and_decodes_with_the_binding_and_raises_typed_errors() -> None:
    codec = binding_codec(Order)
    assert codec.decode(codec.encode(Order("c", 1.0))) == Order("c", 1.0)
    assert repr(codec).startswith("<BindingCodec <Binding Order")
    with pytest.raises(DecodeError):
        codec.decode(b'{"customer": "c"}')
