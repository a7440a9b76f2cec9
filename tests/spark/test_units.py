"""Fast checks with no JVM: packaging, the Java check, options, offsets, the group adapter (TwsTester)."""

from __future__ import annotations

import datetime
import os
import subprocess
import sys
from pathlib import Path

import pytest

from backends.kafka.processor import ContextError, define_group, input, loop, output, persist
from broker.errors import ConfigError, MissingDependency
from contrib.spark import JavaNotFound, check_java
from contrib.spark.offsets import Range, limit_offsets, parse_position, plan_ranges, resolve_position
from contrib.spark.options import Options

ROOT = Path(__file__).resolve().parents[2]


def test_the_package_imports_without_pyspark_and_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "import contrib.spark\n"
        "try:\n"
        "    contrib.spark.register(object())\n"
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
    from contrib.spark import local_session

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


def _row(topic: str, offset: int, value: bytes | None, key: str = "k") -> object:
    from pyspark.sql import Row

    stamp = datetime.datetime(2026, 1, 1, tzinfo=datetime.UTC) + datetime.timedelta(seconds=offset)
    return Row(
        key=key, value=value, topic=topic, partition=0, offset=offset, timestamp=stamp, attributes=None
    )


def test_the_group_adapter_runs_callbacks_with_the_processor_context() -> None:
    pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs PySpark 4.2")
    from pyspark.sql.streaming.tws_tester import TwsTester

    from contrib.spark.processor import GroupProcessor

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
    out = tester.test("k", [_row("in", 2, b"again"), _row("in", 1, b"x")])  # handled in offset order
    assert [(r["topic"], r["value"]) for r in out] == [
        ("seen", b"x"),
        ("seen", b"again"),
        ("g-loop", b"looped"),
        ("g-table", b"2"),
    ]
    assert out[0]["attributes"] == {"app": "test", "n": "1"}
    assert [r["id"] for r in out] == ["g:in:0:1:0", "g:in:0:2:0", "g:in:0:2:1", "g:table:in:0:2"]
    assert tester.peekValueState("table", "k") == (b"2",)
    out = tester.test("k", [_row("g-loop", 0, b"looped")])
    assert [(r["topic"], r["value"]) for r in out] == [("g-table", b"20")]
    out = tester.test("k", [_row("in", 3, b"drop")])
    assert [(r["topic"], r["key"], r["value"]) for r in out] == [("g-table", "k", None)]  # a tombstone
    assert tester.peekValueState("table", "k") is None


def test_misuse_in_a_callback_fails_like_on_one_machine() -> None:
    pytest.importorskip("pyspark.sql.streaming.tws_tester", reason="TwsTester needs PySpark 4.2")
    from pyspark.sql.streaming.tws_tester import TwsTester

    from contrib.spark.processor import GroupProcessor

    graph = define_group("m", input("in", "str", lambda ctx, v: ctx.emit("undeclared", ctx.key, v)))
    with pytest.raises(ContextError, match="no output"):
        TwsTester(GroupProcessor(graph)).test("k", [_row("in", 0, b"x")])


def test_missing_pyspark_is_reported_for_each_entry_point(monkeypatch: pytest.MonkeyPatch) -> None:
    import contrib.spark

    monkeypatch.setitem(sys.modules, "pyspark", None)
    for call in (lambda: contrib.spark.register(object()), contrib.spark.pyspark_version):
        with pytest.raises(MissingDependency, match="spark"):
            call()


def test_old_pyspark_versions_get_clear_errors(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyspark

    from contrib.spark import SparkVersionError, _compat

    monkeypatch.setattr(pyspark, "__version__", "4.0.5")
    with pytest.raises(SparkVersionError, match=r"needs PySpark 4\.1 or later, but PySpark 4\.0\.5"):
        _compat.require_pyspark()
    monkeypatch.setattr(pyspark, "__version__", "4.1.4")
    monkeypatch.setattr(_compat, "has_read_limits", lambda: False)
    with pytest.raises(SparkVersionError, match=r"maxRecordsPerTrigger needs PySpark 4\.2"):
        _compat.require_read_limits("option maxRecordsPerTrigger")
