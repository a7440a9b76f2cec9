"""Type bindings: every type kind and format, content-type negotiation, errors."""

from __future__ import annotations

import json
from typing import Annotated, Any

import msgpack
import pydantic
import pytest

from broker.codecs import JsonCodec, StrCodec
from broker.errors import ConfigError, DecodeError, EncodeError, MissingDependency
from broker.typed import Binding, binding, union
from broker.typed.binding import _choose
from tests.unit.typed_models import Cat, Circle, Dog, Order, Payment, Point, Row, Square

VALUES: list[tuple[Any, Any]] = [
    (Order, Order(1, "pen", ["a"])),
    (Payment, Payment(id=2, amount=9.5)),
    (Point, Point(3, 4)),
    (Row, {"id": 5, "name": "five"}),
    (dict, {"any": [1, 2, {"x": None}]}),
    (list, [1, "two", 3.0]),
    (object, "a bare JSON string"),
]


@pytest.mark.parametrize("fmt", ["json", "msgpack"])
@pytest.mark.parametrize(("kind", "value"), VALUES, ids=lambda v: getattr(v, "__name__", "value"))
def test_every_kind_round_trips_in_both_formats(kind: Any, value: Any, fmt: Any) -> None:
    bound = binding(kind, format=fmt)
    data = bound.encode(value)
    assert bound.decode(data) == value
    other = "application/msgpack" if fmt == "json" else "application/json"
    assert bound.content_type != other
    # the other format is understood on receive, picked by content type
    peer = binding(kind, format="msgpack" if fmt == "json" else "json")
    assert bound.decode(peer.encode(value), other) == value


def test_the_wire_format_is_plain_json_and_msgpack() -> None:
    assert json.loads(binding(Order).encode(Order(1))) == {"id": 1, "item": "book", "tags": []}
    assert msgpack.unpackb(binding(Payment, format="msgpack").encode(Payment(id=1, amount=2.0))) == {
        "id": 1,
        "amount": 2.0,
    }


@pytest.mark.parametrize("engine", ["msgspec", "stdlib"])
def test_dataclasses_ignore_unknown_fields(engine: Any) -> None:
    bound = binding(Order, engine=engine)
    assert bound.decode(b'{"id": 7, "unknown": true}') == Order(7)


def test_pydantic_and_msgspec_ignore_unknown_fields() -> None:
    assert binding(Payment).decode(b'{"id":1,"amount":1.5,"extra":"x"}') == Payment(id=1, amount=1.5)
    assert binding(Point).decode(b'{"x":1,"y":2,"z":3}') == Point(1, 2)


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        (Order, b'{"id":"one"}'),
        (Payment, b'{"id":1,"amount":"lots"}'),
        (Point, b'{"x":1}'),
        (Row, b'{"id":1}'),
    ],
)
def test_a_wrong_field_type_is_a_decode_error(kind: Any, payload: bytes) -> None:
    with pytest.raises(DecodeError) as caught:
        binding(kind).decode(payload)
    assert caught.value.kind == "decode_failed" and not caught.value.retryable


def test_stdlib_checks_fields_present_not_their_types() -> None:
    assert binding(Order, engine="stdlib").decode(b'{"id":"one"}') == Order("one")  # type: ignore[arg-type]
    with pytest.raises(DecodeError, match="missing"):
        binding(Row, engine="stdlib").decode(b'{"id":1}')
    with pytest.raises(DecodeError):
        binding(Order, engine="stdlib").decode(b"[1]")
    with pytest.raises(DecodeError):
        binding(Order, engine="stdlib").decode(b"not json")


def test_engines_are_chosen_by_type() -> None:
    assert binding(Payment).engine == "pydantic"
    assert binding(Point).engine == "msgspec"
    assert binding(Order).engine == "msgspec"  # installed: preferred over the standard library
    assert _choose(Order, "stdlib") == "stdlib"
    with pytest.raises(ConfigError):
        binding(Payment, engine="msgspec")
    with pytest.raises(ConfigError):
        union(Payment, Point)


def test_pydantic_discriminated_union() -> None:
    pets = union(Cat, Dog, discriminator="kind")
    assert pets.decode(b'{"kind":"dog","good":true}') == Dog(good=True)
    assert pets.decode(pets.encode(Cat(lives=9))) == Cat(lives=9)
    with pytest.raises(DecodeError):
        pets.decode(b'{"kind":"fish"}')
    explicit = Binding[Cat | Dog](
        Annotated[Cat | Dog, pydantic.Field(discriminator="kind")], format="msgpack"
    )
    assert explicit.decode(explicit.encode(Dog(good=False))) == Dog(good=False)


def test_msgspec_tagged_union() -> None:
    shapes = union(Circle, Square, format="msgpack")
    assert shapes.decode(shapes.encode(Square(2.0))) == Square(2.0)
    assert union(Circle, Square).decode(b'{"type":"Circle","radius":1.5}') == Circle(1.5)


def test_user_codec_binding_accepts_only_its_content_type() -> None:
    text = binding(codec=StrCodec())
    assert text.content_type == "text/plain; charset=utf-8"
    assert text.decode(text.encode("héllo")) == "héllo"
    assert text.decode(b"x", "text/plain") == "x"
    with pytest.raises(DecodeError, match="only one"):
        text.decode(b"x", "application/json")
    custom = binding(codec=JsonCodec(), content_type="application/vnd.orders+json")
    assert custom.decode(b"[1]", "application/vnd.orders+json; v=2") == [1]


def test_content_types_are_negotiated() -> None:
    bound = binding(Order)
    assert bound.decode(b'{"id":1}', "Application/JSON; charset=utf-8") == Order(1)
    assert bound.decode(msgpack.packb({"id": 1}), "application/x-msgpack") == Order(1)
    with pytest.raises(DecodeError, match="unknown content type") as caught:
        bound.decode(b'{"id":1}', "application/xml")
    assert caught.value.content_type == "application/xml"


def test_encode_errors_are_typed() -> None:
    with pytest.raises(EncodeError):
        binding(Order).encode(object())  # type: ignore[arg-type]
    with pytest.raises(EncodeError):
        binding(dict, engine="stdlib").encode({"x": object()})


def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        Binding(Order, format="xml")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Binding()
    with pytest.raises(ConfigError):
        union(Order)  # type: ignore[call-overload]
    with pytest.raises(ConfigError):
        binding(set, engine="stdlib")


def test_a_missing_library_names_its_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "msgspec", None)  # import msgspec now fails
    with pytest.raises(MissingDependency, match=r"polybroker\[msgspec\]"):
        binding(Order, engine="msgspec")
    assert binding(Order).engine == "stdlib"  # the fallback when msgspec is absent
