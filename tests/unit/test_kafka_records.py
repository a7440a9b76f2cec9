"""KafkaRecord: the consumer's lazily decoded Record reads exactly as an eagerly built one."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.backends.kafka.mapping import KafkaRecord, to_records
from broker.message import EMPTY_ATTRIBUTES, Record


class SdkMessage:
    """Stands in for a confluent-kafka Message (its accessor methods only); counts header reads."""

    def __init__(
        self, topic: str, partition: int, offset: int, key: bytes | None, headers: Any, ts: Any
    ) -> None:
        self._t, self._p, self._o, self._k, self._h, self._ts = topic, partition, offset, key, headers, ts
        self.header_reads = 0

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def value(self) -> bytes:
        return b"v%d" % self._o

    def key(self) -> bytes | None:
        return self._k

    def headers(self) -> Any:
        self.header_reads += 1
        return self._h

    def timestamp(self) -> tuple[int, int]:
        return self._ts


class Committer:
    async def commit(self, record: Record) -> None:
        pass


def test_lazy_fields_equal_eager_decoding() -> None:
    a, b = Committer(), Committer()
    raws = [
        SdkMessage("t", 0, 1, b"k\xff", [("h", b"1"), ("n", None), ("h", b"2")], (1, 1500)),
        SdkMessage("t", 1, 2, None, None, (0, -1)),
        SdkMessage("u", 0, 3, b"", [], (2, 0)),
    ]
    records = to_records(raws, {("t", 0): a}, b, 9.0)
    assert all(type(r) is KafkaRecord for r in records)
    expected = [
        Record("t", 0, 1, b"v1", "k\udcff", {"h": "2", "n": ""}, 1.5, 9.0),
        Record("t", 1, 2, b"v2", None, EMPTY_ATTRIBUTES, None, 9.0),
        Record("u", 0, 3, b"v3", "", EMPTY_ATTRIBUTES, 0.0, 9.0),
    ]
    names = [f.name for f in dataclasses.fields(Record) if f.compare]
    for record, eager in zip(records, expected, strict=True):
        assert [getattr(record, n) for n in names] == [getattr(eager, n) for n in names]
    assert [r.committer for r in records] == [a, b, b]
    assert [r.raw for r in records] == raws
    assert "k\\udcff" in repr(records[0])


def test_fields_stay_assignable_and_the_attributes_mapping_is_kept() -> None:
    raw = SdkMessage("t", 0, 1, b"k", [("h", b"1")], (1, 2000))
    record = to_records([raw], {}, Committer(), 0.0)[0]
    record.attributes["added"] = "yes"  # type: ignore[index]
    assert record.attributes == {"h": "1", "added": "yes"}
    assert raw.header_reads == 1  # decoded once, then kept
    record.key, record.publish_time, record.attributes = None, 3.0, {"x": "y"}
    assert (record.key, record.publish_time, record.attributes) == (None, 3.0, {"x": "y"})
