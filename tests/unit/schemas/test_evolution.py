"""Schema evolution without a registry server: writer and reader schemas (mock:// registry).

confluent-kafka's ``mock://`` registry checks no compatibility, so these tests show the reading
side only: Avro's resolution rules (a v1 reader drops v2's added field, a v2 reader fills its
default) and Protobuf's (unknown fields kept, missing ones default), in both directions.
"""

from __future__ import annotations

import pytest

from broker import schemas
from broker.errors import DecodeError
from tests.unit.schemas.protos import V1, V2
from tests.unit.schemas.support import ORDER_V1, ORDER_V2, mock_registry


def test_avro_v1_reads_v2_and_v2_reads_v1() -> None:
    _, registry = mock_registry()
    v1 = schemas.avro(registry, ORDER_V1, topic="orders")
    v2 = schemas.avro(registry, ORDER_V2, topic="orders")
    old = v1.encode({"id": 1, "item": "a", "qty": 1})
    new = v2.encode({"id": 2, "item": "b", "qty": 2, "note": "gift"})
    assert old[1:5] != new[1:5]  # two versions, two ids under orders-value
    assert v1.decode(new) == {"id": 2, "item": "b", "qty": 2}
    assert v2.decode(old) == {"id": 1, "item": "a", "qty": 1, "note": "none"}


def test_avro_incompatible_reader_is_a_decode_error() -> None:
    _, registry = mock_registry()
    v1 = schemas.avro(registry, ORDER_V1, topic="orders")
    strict = ORDER_V2.replace(', "default": "none"', "")  # a new field without a default
    with pytest.raises(DecodeError):
        schemas.avro(registry, strict, topic="other").decode(v1.encode({"id": 1, "item": "a", "qty": 1}))


def test_protobuf_v1_reads_v2_and_v2_reads_v1() -> None:
    _, registry = mock_registry()
    v1 = schemas.protobuf(registry, V1["Order"], topic="orders")
    v2 = schemas.protobuf(registry, V2["Order"], topic="orders")
    new = v2.encode(V2["Order"](id=2, customer="c", note="gift"))
    old = v1.encode(V1["Order"](id=1, customer="d"))
    read_old_as_v1 = v1.decode(new)
    assert (read_old_as_v1.id, read_old_as_v1.customer) == (2, "c")
    assert V2["Order"].FromString(read_old_as_v1.SerializeToString()).note == "gift"  # unknown field kept
    read_new = v2.decode(old)
    assert (read_new.id, read_new.customer, read_new.note) == (1, "d", "")


def test_a_payload_of_another_format_or_unframed_is_a_decode_error() -> None:
    _, registry = mock_registry()
    avro = schemas.avro(registry, ORDER_V1, topic="orders")
    proto = schemas.protobuf(registry, V1["Order"], topic="orders-pb")
    with pytest.raises(DecodeError, match="writer schema is AVRO"):
        proto.decode(avro.encode({"id": 1, "item": "a", "qty": 1}))
    with pytest.raises(DecodeError, match="not registry-framed"):
        avro.decode(b'{"id": 1}')
    with pytest.raises(DecodeError) as caught:
        avro.decode(b"\x00\x00\x00\x00\x63rest")  # id 99: unknown
    assert isinstance(caught.value.__cause__, schemas.SchemaNotFound)
