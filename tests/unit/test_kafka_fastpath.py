"""The Kafka hot path's two variants: the compiled one gives exactly what the pure-Python one gives.

``broker.backends.kafka.fastpath`` (pure Python, the fallback) and ``broker.backends.kafka._fastpath``
(the same source compiled by mypyc, when the package was built with a compiler) are run on the same
generated fetches and batches: records, their fields, per-partition highest offsets, the messages
kept from a fetch and the produce calls must be identical. Without the compiled module the
comparisons are skipped and the pure-Python variant is checked against an eagerly built reference.
"""

from __future__ import annotations

import dataclasses
import os
import subprocess
import sys
from types import ModuleType
from typing import Any

import pytest

from broker import OutboundMessage
from broker.backends.kafka import fastpath as pure
from broker.backends.kafka import mapping
from broker.driver.acking import EMPTY_ATTRIBUTES
from broker.message import Record

hypothesis = pytest.importorskip("hypothesis", reason="hypothesis is not installed (the test extra pins it)")
st = hypothesis.strategies
given, settings = hypothesis.given, hypothesis.settings


COMPILED: ModuleType | None = mapping.compiled_fastpath()[0]  # None when not built (or stale)
VARIANTS = [pure] + ([COMPILED] if COMPILED is not None else [])


class SdkMessage:
    """A confluent-kafka Message's accessors (the compiled path calls them unbound, as the SDK's)."""

    def __init__(self, topic: str, partition: int, offset: int, key: Any, value: Any, headers: Any, ts: Any):
        self._t, self._p, self._o, self._k, self._v, self._h, self._ts = (
            topic,
            partition,
            offset,
            key,
            value,
            headers,
            ts,
        )
        self._e: Any = None

    def topic(self) -> str:
        return self._t

    def partition(self) -> int:
        return self._p

    def offset(self) -> int:
        return self._o

    def key(self) -> Any:
        return self._k

    def value(self) -> Any:
        return self._v

    def headers(self) -> Any:
        return self._h

    def timestamp(self) -> Any:
        return self._ts

    def error(self) -> Any:
        return self._e


header_sets = st.one_of(
    st.none(),
    st.just([]),
    st.lists(
        st.tuples(st.sampled_from(["source", "trace", "ü"]), st.one_of(st.none(), st.binary(max_size=6))),
        max_size=3,
    ),
)
keys = st.one_of(st.none(), st.binary(max_size=6), st.sampled_from([b"k1", b"\xff\xfe", "ü".encode()]))
messages = st.lists(
    st.tuples(
        st.sampled_from(["a", "b"]),
        st.integers(0, 2),
        st.integers(0, 50),
        keys,
        st.one_of(st.none(), st.binary(max_size=8)),
        st.sampled_from([0, 1]),  # a few header sets repeat, as in real fetches
        header_sets,
        st.sampled_from([(0, -1), (1, 1_700_000_000_123), (2, 5)]),
    ),
    max_size=30,
)


def sdk_messages(specs: list[Any], real: bool) -> list[Any]:
    shared = [("source", b"bench")]
    out = []
    for topic, partition, offset, key, value, reuse, headers, ts in specs:
        headers = list(shared) if reuse and headers is not None else headers
        if real:
            from confluent_kafka import Message

            out.append(
                Message(
                    topic=topic,
                    partition=partition,
                    offset=offset,
                    key=key,
                    value=value,
                    headers=headers,
                    timestamp=ts,
                )
            )
        else:
            out.append(SdkMessage(topic, partition, offset, key, value, headers, ts))
    return out


def has_sdk() -> bool:
    try:
        import confluent_kafka  # noqa: F401
    except ImportError:
        return False
    return True


FIELDS = [f.name for f in dataclasses.fields(Record) if f.compare]


def reference(message: Any) -> list[Any]:
    """The fields of an eagerly built Record (mapping's one-message readers)."""
    return [
        message.topic(),
        message.partition(),
        message.offset(),
        message.value(),
        mapping.key_of(message),
        dict(mapping.attributes_of(message)),
        mapping.publish_time_of(message),
        7.0,
    ]


def builds(variant: ModuleType, raws: list[Any]) -> list[list[Any]]:
    """The records of ``raws`` built both ways a variant can: ``build_records`` (what the pure-Python
    variant runs) and ``record_fields`` + ``mapping._stored`` (what the compiled variant runs)."""
    fetch = mapping._Fetch({}, object(), 7.0)  # type: ignore[arg-type]
    whole = variant.build_records(
        raws, mapping.KafkaRecord, fetch, mapping._attributes_from, EMPTY_ATTRIBUTES
    )
    keys, values, attributes = variant.record_fields(raws, mapping._attributes_from, EMPTY_ATTRIBUTES)
    return [list(whole), mapping._stored(raws, keys, values, attributes, fetch)]


def fields(record: Any) -> list[Any]:
    values = [getattr(record, name) for name in FIELDS]
    values[FIELDS.index("attributes")] = dict(values[FIELDS.index("attributes")])
    return values


@settings(max_examples=150, deadline=None, database=None)
@given(messages, st.booleans())
def test_records_and_offsets_are_the_same_in_every_variant(specs: list[Any], real: bool) -> None:
    raws = sdk_messages(specs, real and has_sdk())
    expected = [reference(m) for m in raws]
    # Offsets rise within a run of one partition (a fetch); a later run may be lower (a seek back).
    ends: dict[tuple[str, int], int] = {}
    for index, m in enumerate(raws):
        tp = (m.topic(), m.partition())
        last_of_run = index + 1 == len(raws) or (raws[index + 1].topic(), raws[index + 1].partition()) != tp
        if last_of_run and (tp not in ends or raws[ends[tp]].offset() < m.offset()):
            ends[tp] = index
    expected_ends = {tp: raws[i].offset() for tp, i in ends.items()}
    in_use = mapping.to_records(raws, {}, object(), 7.0)  # type: ignore[arg-type]
    assert [fields(r) for r in in_use] == expected
    for variant in VARIANTS:
        for records in builds(variant, raws):
            assert [fields(r) for r in records] == expected, variant.__name__
            assert all(
                type(r) is mapping.KafkaRecord and r.raw is m for r, m in zip(records, raws, strict=True)
            )
            attributes = [r.attributes for r in records if r.attributes]
            assert len({id(a) for a in attributes}) == len(attributes)  # never shared
        highest = variant.highest_indexes(raws)
        assert {tp: raws[i].offset() for tp, i in highest.items()} == expected_ends, variant.__name__
        assert [variant.raw_publish_time(r) for r in in_use] == [e[6] for e in expected]


@settings(max_examples=50, deadline=None, database=None)
@given(st.lists(st.booleans(), max_size=12))
def test_the_messages_kept_from_a_fetch_are_the_same_in_every_variant(failed: list[bool]) -> None:
    raws = [SdkMessage("t", 0, i, None, b"v", None, (0, -1)) for i in range(len(failed))]
    for raw, bad in zip(raws, failed, strict=True):
        raw._e = "event" if bad else None
    expected = [r for r, bad in zip(raws, failed, strict=True) if not bad]
    for variant in VARIANTS:
        kept = variant.accepted(raws)
        assert kept == expected
        assert (kept is raws) == (not any(failed))


class Producer:
    """Records ``produce`` calls; raises UnicodeEncodeError as the SDK does for lone surrogates,
    and BufferError once ``room`` records are queued."""

    def __init__(self, room: int) -> None:
        self.room = room
        self.calls: list[tuple[Any, ...]] = []
        self.polls = 0

    def produce(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int = -1,
        callback: Any = None,
        on_delivery: Any = None,
        timestamp: int = 0,
        headers: Any = None,
    ) -> None:
        if len(self.calls) >= self.room:
            raise BufferError("queue full")
        for text in [key, *(headers or {}).values()]:
            if isinstance(text, str):
                text.encode("utf-8")  # raises for surrogate escapes, as the SDK does
        assert (partition, on_delivery, timestamp) == (-1, None, 0)
        self.calls.append((topic, value, key, headers and dict(headers), callback))

    def poll(self, timeout: float) -> int:
        self.polls += 1
        return 0


texts = st.one_of(st.none(), st.sampled_from(["k", "ü", "k\udcff"]))
outbound = st.lists(
    st.builds(
        OutboundMessage,
        st.binary(max_size=4),
        texts,
        st.one_of(
            st.just(EMPTY_ATTRIBUTES),
            st.dictionaries(st.sampled_from(["a", "b"]), st.sampled_from(["x", "\udcfe"])),
        ),
    ),
    max_size=20,
)


@settings(max_examples=100, deadline=None, database=None)
@given(outbound, st.integers(0, 25), st.integers(0, 5))
def test_produce_calls_are_the_same_in_every_variant(batch: list[Any], room: int, start: int) -> None:
    start = min(start, len(batch))
    results = []
    for variant in VARIANTS:
        producer = Producer(room)
        sent = variant.produce_all(producer, "t", batch, start, print, mapping.escaped)
        results.append((sent, producer.calls, producer.polls))
    assert all(result == results[0] for result in results)
    sent, calls, _ = results[0]
    assert sent == min(len(batch), start + room)
    for (_, value, key, headers, _), message in zip(calls, batch[start:sent], strict=True):
        assert value == message.data
        assert key == message.key or key == message.key.encode("utf-8", "surrogateescape")
        assert (headers or {}).keys() == message.attributes.keys()


def test_the_variant_follows_polybroker_no_extensions() -> None:
    probe = "from broker.backends.kafka import mapping; print(mapping.FASTPATH_VARIANT)"
    env = {**os.environ, "POLYBROKER_NO_EXTENSIONS": "1"}
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("pure Python (POLYBROKER_NO_EXTENSIONS")
    env.pop("POLYBROKER_NO_EXTENSIONS")
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.startswith("compiled" if COMPILED is not None else "pure Python")


@pytest.mark.skipif(not has_sdk(), reason="confluent-kafka is not installed")
def test_the_sdk_takes_produce_arguments_in_the_order_the_hot_path_passes_them() -> None:
    """``produce_all`` passes every argument by position; this fails if confluent-kafka reorders them."""
    from confluent_kafka import Producer as SdkProducer

    producer = SdkProducer({"bootstrap.servers": "127.0.0.1:9", "log_level": 0})
    reports: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        reports.append((msg.topic(), msg.partition(), msg.key(), msg.value()))

    batch = [OutboundMessage(b"v", "k", {"a": "x"}), OutboundMessage(b"w", "k\udcff", {"b": "\udcfe"})]
    for variant in VARIANTS:
        assert variant.produce_all(producer, "t", batch, 0, on_delivery, mapping.escaped) == 2
    with pytest.raises(TypeError):  # position 7 is the timestamp (an integer)
        producer.produce("t", b"v", None, -1, None, None, {"a": "x"}, None)
    with pytest.raises(TypeError):  # position 8 is the headers (a list or dict)
        producer.produce("t", b"v", None, -1, None, None, 0, 5)
    producer.purge()
    producer.poll(1.0)
    assert reports == [("t", None, b"k", b"v"), ("t", None, b"k\xff", b"w")] * len(VARIANTS)
