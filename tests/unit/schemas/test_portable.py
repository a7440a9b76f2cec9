"""Registry-framed values through the portable API, on the in-memory backend (any backend alike).

Values round-trip with the id in the payload or in a header (text GUID off Kafka); keys framed by
the registry are refused off Kafka (``NotSupported``); consumers look schemas up off the loop; an
unknown schema id fails only its own message.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any

import pytest

import broker
from broker import OutboundMessage, schemas, typed
from broker.errors import DecodeError, NotSupported
from tests.unit.schemas.support import KEY_AVRO, ORDER_V1, mock_registry

ORDERS = [{"id": i, "item": f"item-{i}", "qty": i} for i in range(3)]


@pytest.fixture
async def backend() -> Any:
    opened = broker.connect(f"inmem://schemas-{uuid.uuid4().hex}")
    async with opened:
        yield opened


@pytest.mark.parametrize("id_in", ["payload", "header"])
async def test_values_round_trip_with_their_schema_id(backend: Any, id_in: str) -> None:
    _, registry = mock_registry()
    binding = schemas.avro(registry, ORDER_V1, id_in=id_in)  # type: ignore[arg-type]
    async with schemas.messages(backend.messages("orders", "s"), binding) as consumer:
        handle = schemas.topic(backend.publisher(), "orders", binding)
        await handle.publish(ORDERS[0], key="c-1", attributes={"trace": "t"})
        await handle.batch_publish(*ORDERS[1:], keys=["c-2", "c-3"])
        got = [await consumer.next_message(timeout=5) for _ in ORDERS]
        await broker.ack_all(got)
    assert [m.decoded for m in got] == ORDERS
    assert [m.key for m in got] == ["c-1", "c-2", "c-3"]
    assert got[0].attributes["content-type"] == "application/vnd.confluent.avro"
    assert got[0].attributes["trace"] == "t"
    if id_in == "header":
        assert uuid.UUID(got[0].attributes[schemas.VALUE_SCHEMA_ID])  # text GUID off Kafka
        assert got[1].data[0] == 2  # the bare Avro datum (id 1 as a zig-zag varint), no 5-byte header
    else:
        assert got[0].data[:5] == b"\x00\x00\x00\x00\x01"


async def test_registry_framed_keys_are_kafka_only(backend: Any) -> None:
    _, registry = mock_registry()
    key = schemas.avro(registry, KEY_AVRO, field="key")
    with pytest.raises(NotSupported, match="Kafka"):
        schemas.topic(backend.publisher(), "orders", schemas.avro(registry, ORDER_V1), key=key)


async def test_unknown_schema_id_fails_its_own_message_only(backend: Any) -> None:
    _, registry = mock_registry()
    binding = schemas.avro(registry, ORDER_V1)
    handled: list[Any] = []
    dead: list[DecodeError] = []

    async def on_decode_error(message: Any, error: DecodeError) -> None:
        dead.append(error)
        await message.ack()

    async with backend.messages("orders", "s") as source:
        await schemas.topic(backend.publisher(), "orders", binding).publish(ORDERS[0])
        await backend.publisher().topic("orders").publish(OutboundMessage(b"\x00\x00\x00\x00\x2aXX"))
        await schemas.topic(backend.publisher(), "orders", binding).publish(ORDERS[1])
        consumer = schemas.messages(source, binding)
        for _ in range(3):
            message = await consumer.next_message(timeout=5)
            try:
                handled.append(message.decoded)
            except DecodeError as exc:
                await on_decode_error(message, exc)
            else:
                await message.ack()
    assert handled == ORDERS[:2]
    assert len(dead) == 1 and isinstance(dead[0].__cause__, schemas.SchemaNotFound)


async def test_a_schema_binding_is_a_typed_binding_and_a_codec(backend: Any) -> None:
    _, registry = mock_registry()
    binding = schemas.avro(registry, ORDER_V1, topic="orders")
    assert isinstance(binding, typed.Binding)
    assert binding.decode(binding.encode(ORDERS[0])) == ORDERS[0]
    await schemas.topic(backend.publisher(), "orders", binding).publish(ORDERS[2])
    async with typed.records(backend.records("orders", "g"), binding) as records:
        record = await records.next_record(timeout=5)
    assert record.decoded == ORDERS[2]


async def test_receiver_and_batched_consumers_resolve_schemas_off_the_loop(backend: Any) -> None:
    _, registry = mock_registry()
    binding = schemas.avro(registry, ORDER_V1)
    handled: list[Any] = []
    undecodable: list[bytes] = []

    async def on_decode_error(message: Any, error: DecodeError) -> None:
        undecodable.append(message.data)
        await message.ack()

    async def handle(message: Any) -> None:
        handled.append(message.decoded)
        await message.ack()

    async with backend.messages("orders", "s"):
        pass  # the subscription exists from here on
    await schemas.topic(backend.publisher(), "orders", binding).batch_publish(*ORDERS)
    await backend.publisher().topic("orders").publish(OutboundMessage(b"\x00\x00\x00\x00\x2aXX"))
    receiver = schemas.receiver(backend.receiver("orders", "s"), binding, on_decode_error=on_decode_error)
    task = asyncio.ensure_future(receiver.receive(handle))
    try:
        async with asyncio.timeout(5):
            while len(handled) + len(undecodable) < 4:  # noqa: ASYNC110 - counting handled messages
                await asyncio.sleep(0.01)
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    assert sorted(handled, key=lambda o: o["id"]) == ORDERS and undecodable == [b"\x00\x00\x00\x00\x2aXX"]

    async with schemas.batched_records(
        backend.batched_records("orders", "g", batch_size=10), binding
    ) as batches:
        got: list[Any] = []
        async with asyncio.timeout(5):
            while len(got) < 3:
                got.extend(
                    r.decoded for r in await batches.next_batch() if r.value[:5] != b"\x00\x00\x00\x00\x2a"
                )
    assert got == ORDERS
