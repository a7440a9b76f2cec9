"""KafkaRecord: the consumer's lazily decoded Record reads exactly as an eagerly built one."""

from __future__ import annotations

import dataclasses
from typing import Any

from broker.backends.kafka.mapping import KafkaRecord, to_records
from broker.driver.acking import EMPTY_ATTRIBUTES
from broker.message import Record


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


def test_assigning_a_field_stores_every_field_and_keeps_the_others() -> None:
    a = Committer()
    raw = SdkMessage("t", 2, 7, b"k", [("h", b"1")], (1, 2000))
    record = to_records([raw], {("t", 2): a}, Committer(), 5.0)[0]
    record.value = b"changed"
    assert isinstance(record, KafkaRecord)
    assert (record.topic, record.partition, record.offset, record.value) == ("t", 2, 7, b"changed")
    assert (record.key, record.attributes, record.publish_time, record.ingestion_time) == (
        "k",
        {"h": "1"},
        2.0,
        5.0,
    )
    assert record.committer is a
    record.offset = 9
    assert record.offset == 9 and raw.offset() == 7
    assert repr(record).startswith("KafkaRecord(")


def test_a_record_built_by_hand_or_replaced_is_a_plain_record() -> None:
    raw = SdkMessage("t", 0, 1, b"k", None, (0, -1))
    record = to_records([raw], {}, Committer(), 0.0)[0]
    copy = dataclasses.replace(record, value=b"other")
    assert (copy.topic, copy.offset, copy.value, copy.key) == ("t", 1, b"other", "k")
    built = KafkaRecord("u", 1, 2, b"v")
    assert (built.topic, built.partition, built.offset, built.value, built.key) == ("u", 1, 2, b"v", None)


def test_a_copied_record_equals_the_original() -> None:
    import copy

    raw = SdkMessage("t", 3, 4, b"k", [("h", b"1")], (1, 2000))
    record = to_records([raw], {}, Committer(), 1.0)[0]
    copied = copy.copy(record)
    names = [f.name for f in dataclasses.fields(Record) if f.init]  # not the typed-consumer state
    assert [getattr(copied, n) for n in names] == [getattr(record, n) for n in names]
    copied.value = b"changed"
    assert record.value == b"v4"


def test_a_record_keeps_the_committer_of_its_fetch() -> None:
    """A partition revoked and assigned again gets a new committer: records of the first
    assignment keep the old one (whose acks are dropped), never the new one."""
    old, new, default = Committer(), Committer(), Committer()
    committers = {("t", 0): old}
    record = to_records([SdkMessage("t", 0, 1, None, None, (0, -1))], committers, default, 0.0)[0]
    committers[("t", 0)] = new
    assert record.committer is old
    other = to_records([SdkMessage("t", 5, 1, None, None, (0, -1))], committers, default, 0.0)[0]
    assert other.committer is default


def offsets_of(batch: Any) -> dict[tuple[str, int], int]:
    return {tp: record.offset for tp, record in batch.highest().items()}


def test_a_batch_knows_each_partitions_highest_record() -> None:
    raws = [
        SdkMessage("t", 0, 10, None, None, (0, -1)),
        SdkMessage("t", 0, 11, None, None, (0, -1)),
        SdkMessage("u", 0, 3, None, None, (0, -1)),  # same partition number, other topic
        SdkMessage("t", 1, 5, None, None, (0, -1)),
        SdkMessage("t", 0, 12, None, None, (0, -1)),  # a second run of t[0]
        SdkMessage("t", 1, 2, None, None, (0, -1)),  # after a seek back: not the highest of t[1]
    ]
    batch = to_records(raws, {}, Committer(), 0.0)
    assert offsets_of(batch) == {("t", 0): 12, ("u", 0): 3, ("t", 1): 5}
    assert to_records([], {}, Committer(), 0.0).highest() == {}


def test_a_changed_batch_forgets_its_highest_records() -> None:
    raws = [SdkMessage("t", 0, i, None, None, (0, -1)) for i in range(3)]
    changes = [
        lambda b: b.pop(),
        lambda b: b.append(b[0]),
        lambda b: b.extend([]),
        lambda b: b.insert(0, b[0]),
        lambda b: b.remove(b[-1]),
        lambda b: b.clear(),
        lambda b: b.__setitem__(0, b[1]),
        lambda b: b.__delitem__(slice(1, None)),
        lambda b: b.__iadd__([]),
        lambda b: b.__imul__(1),
    ]
    for change in changes:
        batch = to_records(raws, {}, Committer(), 0.0)
        change(batch)
        assert batch.highest() is None


class Counting:
    def __init__(self) -> None:
        self.offsets: list[tuple[str, int, int]] = []

    async def commit(self, record: Record) -> None:
        self.offsets.append((record.topic, record.partition, record.offset))


async def test_commit_highest_offsets_uses_what_the_batch_knows_and_walks_a_changed_one() -> None:
    import broker

    committer = Counting()
    raws = [SdkMessage("t", p, o, None, None, (0, -1)) for o in range(4) for p in (0, 1)]
    batch = to_records(raws, {("t", 0): committer, ("t", 1): committer}, Committer(), 0.0)
    await broker.commit_highest_offsets(batch)
    assert sorted(committer.offsets) == [("t", 0, 3), ("t", 1, 3)]
    committer.offsets.clear()
    del batch[-3:]  # the last record of t[0] and two of t[1] are gone: never committed
    await broker.commit_highest_offsets(batch)
    assert sorted(committer.offsets) == [("t", 0, 2), ("t", 1, 1)]
