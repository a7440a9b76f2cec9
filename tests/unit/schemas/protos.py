"""Protobuf message classes for the schema tests, built at run time (no protoc).

``orders_v1.proto`` and ``orders_v2.proto`` (package ``shop``) each define ``Order`` with a nested
``Order.Line``, and ``Audit`` first (so ``Order`` is message index 1 and ``Order.Line`` [1, 0]).
v2 adds ``Order.note`` (field 4); each version lives in a descriptor pool of its own, as two
programs built from two versions of the file would.
"""

from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

_T = descriptor_pb2.FieldDescriptorProto


def _field(
    message: Any, name: str, number: int, kind: int, *, type_name: str = "", repeated: bool = False
) -> None:
    field = message.field.add(name=name, number=number, type=kind)
    field.label = _T.LABEL_REPEATED if repeated else _T.LABEL_OPTIONAL
    if type_name:
        field.type_name = type_name


def build(version: int) -> dict[str, Any]:
    """{"Order": class, "Line": class, "Audit": class} of ``version`` (1 or 2)."""
    proto = descriptor_pb2.FileDescriptorProto(
        name=f"orders_v{version}.proto", package="shop", syntax="proto3"
    )
    audit = proto.message_type.add(name="Audit")
    _field(audit, "who", 1, _T.TYPE_STRING)
    order = proto.message_type.add(name="Order")
    _field(order, "id", 1, _T.TYPE_INT64)
    _field(order, "customer", 2, _T.TYPE_STRING)
    _field(order, "lines", 3, _T.TYPE_MESSAGE, type_name=".shop.Order.Line", repeated=True)
    if version >= 2:
        _field(order, "note", 4, _T.TYPE_STRING)
    line = order.nested_type.add(name="Line")
    _field(line, "sku", 1, _T.TYPE_STRING)
    _field(line, "qty", 2, _T.TYPE_INT32)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return {
        name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"shop.{name}"))
        for name in ("Order", "Order.Line", "Audit")
    } | {"Line": message_factory.GetMessageClass(pool.FindMessageTypeByName("shop.Order.Line"))}


V1 = build(1)
V2 = build(2)
