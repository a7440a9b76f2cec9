"""Codecs and the key partitioners."""

from __future__ import annotations

import pytest

from broker.codecs import BytesCodec, JsonCodec, MsgpackCodec, StrCodec, codec_by_name
from broker.driver.partitioning import fnv1a, murmur2, partition_for, partitioner_by_name
from broker.errors import ConfigError, DecodeError, EncodeError


@pytest.mark.parametrize(
    ("codec", "value"),
    [
        (BytesCodec(), b"\x00\xffraw"),
        (StrCodec(), "naïve ☃"),
        (JsonCodec(), {"a": [1, 2.5, None, "ü"], "b": True}),
        (MsgpackCodec(), {"a": [1, 2.5, None, "ü"], "b": b"\x00"}),
    ],
)
def test_round_trip(codec: object, value: object) -> None:
    assert codec.decode(codec.encode(value)) == value  # type: ignore[attr-defined]


def test_codec_errors_are_typed() -> None:
    with pytest.raises(EncodeError):
        StrCodec().encode(42)  # type: ignore[arg-type]
    with pytest.raises(DecodeError):
        StrCodec().decode(b"\xff\xfe")
    with pytest.raises(EncodeError):
        JsonCodec().encode({"x": object()})
    with pytest.raises(DecodeError):
        JsonCodec().decode(b"{nope")
    with pytest.raises(EncodeError):
        MsgpackCodec().encode(object())
    with pytest.raises(DecodeError):
        MsgpackCodec().decode(b"\xc1")
    with pytest.raises(EncodeError):
        BytesCodec().encode("text")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        codec_by_name("xml")
    assert isinstance(codec_by_name("json"), JsonCodec)


@pytest.mark.parametrize(
    ("key", "signed"),
    [
        # Kafka's own murmur2 test vectors (org.apache.kafka.common.utils.UtilsTest)
        ("21", -973932308),
        ("foobar", -790332482),
        ("a-little-bit-long-string", -985981536),
        ("a-little-bit-longer-string", -1486304829),
        ("lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8", -58897971),
        ("abc", 479470107),
    ],
)
def test_murmur2_matches_kafka(key: str, signed: int) -> None:
    assert murmur2(key.encode()) == signed & 0xFFFFFFFF


def test_partitioning_is_stable_and_in_range() -> None:
    for n in (1, 3, 12):
        for key in (b"", b"a", b"order-42", "ключ".encode()):
            p = partition_for(key, n)
            assert 0 <= p < n
            assert partitioner_by_name("murmur2")(key, n) == p
            assert 0 <= partitioner_by_name("fnv1a")(key, n) < n
    assert fnv1a(b"") == 0x811C9DC5
    assert fnv1a(b"a") == 0xE40C292C
    with pytest.raises(ConfigError):
        partitioner_by_name("crc32")
