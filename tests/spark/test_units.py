"""Fast checks with no JVM: packaging, the Java check, options, offsets, the group adapter (TwsTester)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broker.backends.kafka.processor import ContextError, define_group, input, loop, output, persist
from broker.contrib.spark import JavaNotFound, check_java
from broker.contrib.spark.offsets import Range, limit_offsets, parse_position, plan_ranges, resolve_position
from broker.contrib.spark.options import Options
from broker.errors import ConfigError, MissingDependency

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_imports_without_pyspark_and_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import broker.contrib.spark\n"
        "try:\n"
        "    broker.contrib.spark.register(object())\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("MissingDependency")
    assert "polybroker[spark]" in done.stdout


def test_missing_java_is_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(JavaNotFound, match="Java 17") as caught:
        check_java({"PATH": str(tmp_path)})
    assert "JAVA_HOME" in str(caught.value)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    from broker.contrib.spark import local_session

    with pytest.raises(JavaNotFound):  # before any attempt to launch Spark's JVM
        local_session()


def test_an_old_java_is_refused(tmp_path: Path) -> None:
    fake = tmp_path / "bin" / "java"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\necho 'openjdk version \"11.0.21\" 2023-10-17' >&2\n")
    fake.chmod(0o755)
    with pytest.raises(JavaNotFound, match=r"Java 11\.0\.21") as caught:
        check_java({"JAVA_HOME": str(tmp_path), "PATH": os.defpath})
    assert caught.value.found_version == "11.0.21"


def test_the_installed_java_passes() -> None:
    try:
        version = check_java()
    except JavaNotFound as exc:
        pytest.skip(str(exc))
    assert int(version.split(".")[0]) >= 17


def test_options_resolve_secrets_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TEST_KAFKA_URL", "kafka://h:9092")
    monkeypatch.setenv("TEST_KAFKA_PASSWORD", "s3cret")
    options = Options(
        {
            "urlEnv": "TEST_KAFKA_URL",
            "secretEnv.sasl_password": "TEST_KAFKA_PASSWORD",
            "setting.sasl_username": "u",
        }
    )
    assert options.target() == {"url": "kafka://h:9092", "sasl_password": "s3cret", "sasl_username": "u"}
    assert "s3cret" not in repr(options) and "s3cret" not in str(options.raw)
    assert options.scheme() == "kafka"
    with pytest.raises(ConfigError, match="UNSET_VARIABLE"):
        Options({"urlEnv": "UNSET_VARIABLE"}).target()
    with pytest.raises(ConfigError, match="Python workers"):
        Options({"url": "inmem://x"}).connect()
    with pytest.raises(ConfigError, match="'url'"):
        Options({"topic": "t"}).target()


def test_positions_and_read_limits() -> None:
    earliest = {"t": {"0": 0, "1": 5}}
    latest = {"t": {"0": 100, "1": 15}}
    assert resolve_position(parse_position(None, "earliest"), earliest, latest) == earliest
    assert resolve_position(parse_position('{"t": {"0": 7, "1": -1}}', "earliest"), earliest, latest) == {
        "t": {"0": 7, "1": 15}
    }
    with pytest.raises(ConfigError):
        parse_position("yesterday", "earliest")
    with pytest.raises(ConfigError, match="does not read"):
        resolve_position({"other": {"0": 1}}, earliest, latest)
    limited = limit_offsets(earliest, latest, 11)
    assert limited == {"t": {"0": 10, "1": 6}}  # shared by backlog (100 and 10), each partition moves
    assert limit_offsets(earliest, latest, 1000) == latest
    assert plan_ranges(earliest, limited) == [Range("t", 0, 0, 10), Range("t", 1, 5, 6)]
    assert plan_ranges({}, {"t": {"0": 3}}, earliest) == [Range("t", 0, 0, 3)]


def _row(
    topic: str,
    offset: int,
    value: bytes | None,
    key: bytes = b"k",
    attributes: object = None,
) -> object:
    """A row as the source yields it (binary key and attribute values)."""
    from pyspark.sql import Row

    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=offset)
    return Row(
        key=key, value=value, topic=topic, partition=0, offset=offset, timestamp=stamp, attributes=attributes
    )


def test_the_group_adapter_runs_callbacks_with_the_processor_context() -> None:
    pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs PySpark 4.2")
    from pyspark.sql.streaming.tws_tester import TwsTester

    from broker.contrib.spark.processor import GroupProcessor

    def on_input(ctx, value):  # type: ignore[no-untyped-def]
        if value == "drop":
            ctx.delete()
            return
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("seen", ctx.key, value, headers={"n": str(ctx.value())})
        if value == "again":
            ctx.loopback(ctx.key, "looped")

    def on_loop(ctx, value):  # type: ignore[no-untyped-def]
        ctx.set_value(ctx.value() * 10)

    graph = define_group(
        "g", input("in", "str", on_input), loop("str", on_loop), output("seen", "str"), persist("int64")
    )
    tester = TwsTester(GroupProcessor(graph, headers={"app": "test"}))
    out = tester.test(b"k", [_row("in", 2, b"again"), _row("in", 1, b"x")])  # handled in offset order
    assert [(r["topic"], r["value"]) for r in out] == [
        ("seen", b"x"),
        ("seen", b"again"),
        ("g-loop", b"looped"),
        ("g-table", b"2"),
    ]
    assert [r["key"] for r in out] == [b"k"] * 4  # OUTPUT_SCHEMA: binary keys and attribute values
    assert out[0]["attributes"] == {"app": b"test", "n": b"1"}
    assert [r["id"] for r in out] == ["g:in:0:1:0", "g:in:0:2:0", "g:in:0:2:1", "g:table:in:0:2"]
    assert tester.peekValueState("table", b"k") == (b"2",)
    out = tester.test(b"k", [_row("g-loop", 0, b"looped")])
    assert [(r["topic"], r["value"]) for r in out] == [("g-table", b"20")]
    out = tester.test(b"k", [_row("in", 3, b"drop")])
    assert [(r["topic"], r["key"], r["value"]) for r in out] == [("g-table", b"k", None)]  # a tombstone
    assert tester.peekValueState("table", b"k") is None


def test_the_group_adapter_keeps_keys_and_headers_that_are_not_utf8() -> None:
    pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs PySpark 4.2")
    from pyspark.sql.streaming.tws_tester import TwsTester

    from broker.contrib.spark.processor import GroupProcessor

    seen: list[tuple[str, dict[str, str]]] = []

    def on_input(ctx, value):  # type: ignore[no-untyped-def]
        seen.append((ctx.key, dict(ctx.headers)))
        ctx.set_value(value)
        ctx.emit("out", ctx.key, value, headers={"echo": ctx.headers["h"]})

    graph = define_group("b", input("in", "bytes", on_input), output("out", "bytes"), persist("bytes"))
    key = b"\xff\xfek"  # attributes as (name, value) pairs, as Spark hands a map column to the operator
    out = TwsTester(GroupProcessor(graph)).test(key, [_row("in", 0, b"v", key, [("h", b"\xfe\xff")])])
    # The callback sees the library's str (surrogate escapes), as the Kafka backend's reads give it.
    assert seen == [("\udcff\udcfek", {"h": "\udcfe\udcff"})]
    # What goes to the sink is the same bytes again.
    assert [(r["topic"], r["key"], r["value"]) for r in out] == [("out", key, b"v"), ("b-table", key, b"v")]
    assert out[0]["attributes"] == {"echo": b"\xfe\xff"}


def test_misuse_in_a_callback_fails_like_on_one_machine() -> None:
    pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs PySpark 4.2")
    from pyspark.sql.streaming.tws_tester import TwsTester

    from broker.contrib.spark.processor import GroupProcessor

    graph = define_group("m", input("in", "str", lambda ctx, v: ctx.emit("undeclared", ctx.key, v)))
    with pytest.raises(ContextError, match="no output"):
        TwsTester(GroupProcessor(graph)).test(b"k", [_row("in", 0, b"x")])


def test_missing_pyspark_is_reported_for_each_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    import broker.contrib.spark

    monkeypatch.setitem(sys.modules, "pyspark", None)
    for call in (lambda: broker.contrib.spark.register(object()), broker.contrib.spark.pyspark_version):
        with pytest.raises(MissingDependency, match="spark"):
            call()


def test_old_pyspark_versions_get_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    from broker.contrib.spark import SparkVersionError, _compat

    monkeypatch.setattr(pyspark, "__version__", "4.0.5")
    with pytest.raises(SparkVersionError, match=r"needs PySpark 4\.1 or later, but PySpark 4\.0\.5"):
        _compat.require_pyspark()
    monkeypatch.setattr(pyspark, "__version__", "4.1.4")
    monkeypatch.setattr(_compat, "has_read_limits", lambda: False)
    with pytest.raises(SparkVersionError, match=r"maxRecordsPerTrigger needs PySpark 4\.2"):
        _compat.require_read_limits("option maxRecordsPerTrigger")


class _FakeKafkaMessage:
    """Stands in for a confluent-kafka ``Message`` (the accessors ``kafka_batch`` calls)."""

    def __init__(self, offset: int, key: bytes | None, value: bytes | None, headers: object) -> None:
        self._offset, self._key, self._value, self._headers = offset, key, value, headers

    def key(self) -> bytes | None:
        return self._key

    def value(self) -> bytes | None:
        return self._value

    def offset(self) -> int:
        return self._offset

    def headers(self) -> object:
        return self._headers

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_767_225_600_000)


def test_kafka_batch_with_fake_sdk_messages_keeps_key_and_header_bytes() -> None:
    from broker.backends.kafka.mapping import decode_headers
    from broker.contrib.spark.arrow import arrow_schema, kafka_batch

    headers = [("h", b"\xff\xfeh"), ("empty", None), ("h2", b"text"), ("h", b"\xfflast")]
    messages = [
        _FakeKafkaMessage(0, b"\xff\xfek", b"v0", headers),
        _FakeKafkaMessage(1, None, None, None),
        _FakeKafkaMessage(2, b"plain", b"v2", []),
    ]
    batch = kafka_batch(messages, "t", 3)
    assert batch.schema == arrow_schema()
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [b"\xff\xfek", None, b"plain"]
    assert [r["value"] for r in rows] == [b"v0", None, b"v2"]
    # A repeated header keeps its last value and a null value reads as b"", as through the library.
    assert dict(rows[0]["attributes"]) == {"h": b"\xfflast", "empty": b"", "h2": b"text"}
    assert rows[1]["attributes"] is None and rows[2]["attributes"] is None
    library = decode_headers(headers)
    as_bytes = {name: value.encode("utf-8", "surrogateescape") for name, value in library.items()}
    assert dict(rows[0]["attributes"]) == as_bytes


def test_records_and_messages_batches_restore_the_bytes_behind_surrogate_escapes() -> None:
    from broker.contrib.spark.arrow import arrow_schema, messages_batch, records_batch
    from broker.message import Message, Record

    escaped_key = b"\xff\xfek".decode("utf-8", "surrogateescape")  # how the library reads such a key
    escaped_value = b"\xfe".decode("utf-8", "surrogateescape")
    records = [
        Record("t", 0, 5, b"v", escaped_key, {"h": escaped_value, "plain": "é"}, 1.5),
        Record("t", 0, 6, b"w", None, {}, None),
    ]
    rows = records_batch(records).to_pylist()
    assert [r["key"] for r in rows] == [b"\xff\xfek", None]
    assert dict(rows[0]["attributes"]) == {"h": b"\xfe", "plain": "é".encode()}
    assert rows[1]["attributes"] is None
    messages = [Message("m1", b"d", escaped_key, {"h": escaped_value}), Message("m2", b"e")]
    batch = messages_batch(messages, "q", 10)
    assert batch.schema == arrow_schema()
    rows = batch.to_pylist()
    assert [(r["key"], r["offset"], r["id"]) for r in rows] == [(b"\xff\xfek", 10, "m1"), (None, 11, "m2")]
    assert dict(rows[0]["attributes"]) == {"h": b"\xfe"}


def test_sink_rows_take_binary_or_string_keys_and_attributes_losslessly() -> None:
    from broker.contrib.spark.arrow import pa
    from broker.contrib.spark.sink import _rows

    arrow = pa()
    binary = arrow.RecordBatch.from_pydict(
        {
            "key": arrow.array([b"\xff\xfek", None], arrow.binary()),
            "value": arrow.array([b"v", b"w"], arrow.binary()),
            "attributes": arrow.array(
                [[("h", b"\xfe\xff"), ("t", b"text")], None], arrow.map_(arrow.string(), arrow.binary())
            ),
        }
    )
    [first, second] = _rows(binary, "out", "id", "base", 0).by_topic["out"]
    assert first.key == b"\xff\xfek".decode("utf-8", "surrogateescape")
    assert first.attributes == {
        "h": b"\xfe\xff".decode("utf-8", "surrogateescape"),
        "t": "text",
        "id": "base:0",
    }
    assert second.key is None and second.attributes == {"id": "base:1"}
    text = arrow.RecordBatch.from_pydict(
        {
            "key": arrow.array(["k"], arrow.string()),
            "value": arrow.array(["v"], arrow.string()),
            "attributes": arrow.array([[("a", "b")]], arrow.map_(arrow.string(), arrow.string())),
        }
    )
    [only] = _rows(text, "out", None, "base", 0).by_topic["out"]
    assert (only.key, only.data, only.attributes) == ("k", b"v", {"a": "b"})


def test_a_journal_written_with_string_keys_is_read_in_the_binary_schema(tmp_path: Path) -> None:
    import pyarrow.ipc

    from broker.contrib.spark.acks import read_journal
    from broker.contrib.spark.arrow import arrow_schema, pa

    arrow = pa()
    old_schema = arrow.schema(
        [
            ("key", arrow.string()),
            ("value", arrow.binary()),
            ("topic", arrow.string()),
            ("partition", arrow.int32()),
            ("offset", arrow.int64()),
            ("timestamp", arrow.timestamp("us", tz="UTC")),
            ("attributes", arrow.map_(arrow.string(), arrow.string())),
            ("id", arrow.string()),
        ]
    )
    old = arrow.RecordBatch.from_pylist(
        [
            {
                "key": "k",
                "value": b"v",
                "topic": "q",
                "partition": 0,
                "offset": 0,
                "timestamp": None,
                "attributes": [("a", "é")],
                "id": "m0",
            },
            {
                "key": None,
                "value": b"w",
                "topic": "q",
                "partition": 0,
                "offset": 1,
                "timestamp": None,
                "attributes": None,
                "id": "m1",
            },
        ],
        schema=old_schema,
    )
    path = tmp_path / f"{0:020d}-{2:020d}.arrow"
    with arrow.OSFile(str(path), "wb") as sink, pyarrow.ipc.new_file(sink, old_schema) as writer:
        writer.write_batch(old)
    [batch] = list(read_journal(str(tmp_path), 0, 2))
    assert batch.schema == arrow_schema()
    rows = batch.to_pylist()
    assert [r["key"] for r in rows] == [b"k", None]
    assert rows[0]["attributes"] == [("a", "é".encode())]
