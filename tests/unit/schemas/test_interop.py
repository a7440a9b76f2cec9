"""Interoperability with confluent-kafka's own serializers on the same (mock://) registry.

Avro and Protobuf: the bytes our bindings write equal those confluent-kafka's serializers write,
in every subject name strategy, with the id in the payload or a header, and each side decodes the
other's. JSON Schema: the same 5-byte header and decode-equality both ways.
"""

from __future__ import annotations

from typing import Any

import pytest

from broker import schemas
from tests.unit.schemas.protos import V1
from tests.unit.schemas.support import KEY_AVRO, ORDER_JSON, ORDER_V1, ctx, mock_registry, sr, strategy

avro_mod = pytest.importorskip("confluent_kafka.schema_registry.avro")
protobuf_mod = pytest.importorskip("confluent_kafka.schema_registry.protobuf")
json_mod = pytest.importorskip("confluent_kafka.schema_registry.json_schema")

ORDER = {"id": 7, "item": "book", "qty": 2}


def _conf(name: str, **more: Any) -> dict[str, Any]:
    return {"subject.name.strategy": strategy(name), **more}


@pytest.mark.parametrize("name", ["topic", "record", "topic_record"])
def test_avro_bytes_equal_confluent_in_every_strategy(name: str) -> None:
    client, registry = mock_registry()
    ours = schemas.avro(registry, ORDER_V1, subject_strategy=name, topic="orders")
    theirs = avro_mod.AvroSerializer(client, ORDER_V1, conf=_conf(name))
    mine = ours.encode(ORDER)
    assert mine == theirs(ORDER, ctx("orders"))
    other = {"id": -3, "item": "naïve ☃", "qty": 0}  # later values: the cached-id path
    assert ours.encode(other) == theirs(other, ctx("orders"))
    assert mine[0] == 0 and int.from_bytes(mine[1:5], "big") == 1
    subject = {"topic": "orders-value", "record": "shop.Order", "topic_record": "orders-shop.Order"}[name]
    assert client.get_subjects() == [subject]
    # each side reads the other's
    assert avro_mod.AvroDeserializer(client)(mine, ctx("orders")) == ORDER
    assert ours.decode(theirs(ORDER, ctx("orders"))) == ORDER


def test_avro_key_and_lookup_and_latest_match_confluent() -> None:
    client, registry = mock_registry()
    theirs = avro_mod.AvroSerializer(client, KEY_AVRO, conf=_conf("topic"))
    key = {"customer": "c-7"}
    expected = theirs(key, ctx("orders", "key"))  # registers orders-key
    looked_up = schemas.avro(registry, KEY_AVRO, field="key", auto_register=False, topic="orders")
    latest = schemas.avro(
        registry, KEY_AVRO, field="key", auto_register=False, use_latest=True, topic="orders"
    )
    assert looked_up.encode(key) == expected == latest.encode(key)
    assert client.get_subjects() == ["orders-key"]


def test_avro_unregistered_subject_with_auto_register_off_is_schema_not_found() -> None:
    _, registry = mock_registry()
    binding = schemas.avro(registry, ORDER_V1, auto_register=False, topic="orders")
    with pytest.raises(schemas.SchemaNotFound) as caught:
        binding.encode(ORDER)
    assert caught.value.kind == "not_found" and not caught.value.retryable


def test_avro_schema_guid_in_a_header_as_confluent_writes_it() -> None:
    client, registry = mock_registry()
    ours = schemas.avro(registry, ORDER_V1, id_in="header")
    theirs = avro_mod.AvroSerializer(
        client, ORDER_V1, conf=_conf("topic", **{"schema.id.serializer": sr.header_schema_id_serializer})
    )
    our_headers: dict[str, bytes] = {}
    their_headers: dict[str, bytes] = {}
    mine = ours.encode_for(ORDER, "orders", our_headers)
    assert mine == theirs(ORDER, ctx("orders", headers=their_headers))
    assert our_headers == their_headers and len(our_headers[schemas.VALUE_SCHEMA_ID]) == 17
    # confluent-kafka reads ours with the header (its dual deserializer), we read theirs
    header = [(schemas.VALUE_SCHEMA_ID, our_headers[schemas.VALUE_SCHEMA_ID])]
    assert avro_mod.AvroDeserializer(client)(mine, ctx("orders", headers=header)) == ORDER
    text = our_headers[schemas.VALUE_SCHEMA_ID].decode("utf-8", "surrogateescape")
    assert ours.decode_payload(mine, {schemas.VALUE_SCHEMA_ID: text}) == ORDER


def test_protobuf_guid_header_with_message_indexes_as_confluent_writes_it() -> None:
    client, registry = mock_registry()
    value = V1["Line"](sku="z", qty=3)  # a nested type: indexes [1, 0] go into the header
    ours = schemas.protobuf(registry, V1["Line"], id_in="header")
    theirs = protobuf_mod.ProtobufSerializer(
        V1["Line"], client, conf=_conf("topic", **{"schema.id.serializer": sr.header_schema_id_serializer})
    )
    our_headers: dict[str, bytes] = {}
    their_headers: dict[str, bytes] = {}
    mine = ours.encode_for(value, "lines", our_headers)
    assert mine == theirs(value, ctx("lines", headers=their_headers)) == value.SerializeToString()
    assert our_headers == their_headers and len(our_headers[schemas.VALUE_SCHEMA_ID]) > 17
    header = [(schemas.VALUE_SCHEMA_ID, our_headers[schemas.VALUE_SCHEMA_ID])]
    reader = protobuf_mod.ProtobufDeserializer(V1["Line"], {"use.deprecated.format": False})
    assert reader(mine, ctx("lines", headers=header)) == value
    text = our_headers[schemas.VALUE_SCHEMA_ID].decode("utf-8", "surrogateescape")
    assert ours.decode_payload(mine, {schemas.VALUE_SCHEMA_ID: text}) == value


@pytest.mark.parametrize(("name", "path"), [("Order", [1]), ("Line", [1, 0])])
def test_protobuf_bytes_equal_confluent_with_message_indexes(name: str, path: list[int]) -> None:
    client, registry = mock_registry()
    cls = V1[name]
    value = (
        cls(id=9, customer="c", lines=[V1["Line"](sku="a", qty=2)])
        if name == "Order"
        else cls(sku="z", qty=3)
    )
    ours = schemas.protobuf(registry, cls, topic="orders")
    theirs = protobuf_mod.ProtobufSerializer(cls, client, conf=_conf("topic"))
    mine = ours.encode(value)
    assert mine == theirs(value, ctx("orders"))
    assert ours.encode(value) == mine  # later values: the cached-id path
    from broker.schemas.framing import message_indexes

    assert message_indexes(mine, 5)[0] == path
    assert (
        protobuf_mod.ProtobufDeserializer(cls, {"use.deprecated.format": False})(mine, ctx("orders")) == value
    )
    assert ours.decode(theirs(value, ctx("orders"))) == value


def test_protobuf_record_strategies_name_the_full_message_name() -> None:
    client, registry = mock_registry()
    value = V1["Audit"](who="me")
    for name in ("record", "topic_record"):
        ours = schemas.protobuf(registry, V1["Audit"], subject_strategy=name, topic="audits")
        theirs = protobuf_mod.ProtobufSerializer(V1["Audit"], client, conf=_conf(name))
        assert ours.encode(value) == theirs(value, ctx("audits")) == ours.encode(value)
    assert sorted(client.get_subjects()) == ["audits-shop.Audit", "shop.Audit"]


def test_json_schema_same_header_and_decode_equality_both_ways() -> None:
    client, registry = mock_registry()
    value = {"id": 3, "item": "pen"}
    ours = schemas.json_schema(registry, ORDER_JSON, topic="orders")
    theirs = json_mod.JSONSerializer(ORDER_JSON, client, conf=_conf("topic"))
    mine, their_bytes = ours.encode(value), theirs(value, ctx("orders"))
    assert mine[:5] == their_bytes[:5] == b"\x00\x00\x00\x00\x01"
    reader = json_mod.JSONDeserializer(ORDER_JSON, schema_registry_client=client)
    assert reader(mine, ctx("orders")) == value == ours.decode(their_bytes)


def test_json_schema_invalid_value_is_an_encode_error() -> None:
    _, registry = mock_registry()
    ours = schemas.json_schema(registry, ORDER_JSON, topic="orders")
    from broker.errors import EncodeError

    with pytest.raises(EncodeError):
        ours.encode({"id": "not a number"})


def test_wrong_values_are_encode_errors_on_every_path() -> None:
    _, registry = mock_registry()
    from broker.errors import EncodeError

    avro = schemas.avro(registry, ORDER_V1, topic="orders")
    proto = schemas.protobuf(registry, V1["Order"], topic="orders-pb")
    for _ in range(2):  # first value (confluent-kafka's serializer) and later ones (cached id)
        with pytest.raises(EncodeError):
            avro.encode({"id": "x", "item": 1, "qty": None})
        with pytest.raises(EncodeError):
            proto.encode(V1["Audit"](who="x"))
        avro.encode(ORDER)
        proto.encode(V1["Order"](id=1))
