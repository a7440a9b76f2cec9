"""The portable checks of messages to publish (``broker.driver.outbound``, ``broker.driver.attributes``)."""

from __future__ import annotations

from collections import OrderedDict
from typing import Any

import pytest

from broker import OutboundMessage
from broker.driver.attributes import validate_attributes
from broker.driver.outbound import check_batch
from broker.errors import InvalidAttributes, InvalidMessage


class CountingAttributes(dict[str, str]):
    """A dict subclass that counts how often its items are walked."""

    walks = 0

    def items(self) -> Any:
        CountingAttributes.walks += 1
        return super().items()


@pytest.mark.parametrize(
    "attributes",
    [{"a": 1}, {1: "a"}, {"": "a"}, {"a": b"x"}, {"a": None}, OrderedDict(a=2), [("a", "b")]],
)
def test_bad_attributes_raise_invalid_attributes(attributes: Any) -> None:
    with pytest.raises(InvalidAttributes):
        validate_attributes(attributes)


def test_good_attributes_of_any_mapping_pass() -> None:
    class Name(str):
        pass

    validate_attributes({"a": "b", "c": ""})
    validate_attributes(OrderedDict(a="b"))
    validate_attributes({Name("a"): Name("b")})
    validate_attributes(None)


def test_a_batch_sharing_one_attributes_mapping_validates_it_once() -> None:
    shared = CountingAttributes(source="bench")
    CountingAttributes.walks = 0
    check_batch([OutboundMessage(b"x", key="k", attributes=shared) for _ in range(100)])
    assert CountingAttributes.walks == 1


def test_every_distinct_attributes_mapping_of_a_batch_is_checked() -> None:
    good = {"a": "b"}
    batch = [OutboundMessage(b"x", attributes=good)] * 3 + [OutboundMessage(b"x", attributes={"a": 1})]  # type: ignore[dict-item]
    with pytest.raises(InvalidAttributes, match="'a' must be a str"):
        check_batch(batch)


@pytest.mark.parametrize(
    ("message", "error"),
    [
        ("text", "publish takes an OutboundMessage"),
        (OutboundMessage("text"), "encode text first"),  # type: ignore[arg-type]
        (OutboundMessage(b"x", key=b"k"), "key must be str"),  # type: ignore[arg-type]
    ],
)
def test_a_bad_message_anywhere_in_a_batch_raises_invalid_message(message: Any, error: str) -> None:
    with pytest.raises(InvalidMessage, match=error):
        check_batch([OutboundMessage(b"ok"), message])


def test_bytearray_and_memoryview_data_are_accepted() -> None:
    check_batch([OutboundMessage(bytearray(b"x")), OutboundMessage(memoryview(b"x"), attributes={"a": "b"})])  # type: ignore[arg-type]
