"""The broker command line."""

from __future__ import annotations

import io
import json
import signal
import subprocess
import sys
import time
import uuid

import pytest

import broker
from broker.cli.main import main
from broker.connect import available_backends


def run(args: list[str], stdin: str = "", monkeypatch: pytest.MonkeyPatch | None = None) -> int:
    if monkeypatch is not None:
        monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main(args)


def test_help_explains_urls_and_commands() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "--help"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0
    for word in ("demo", "publish", "consume", "dev", "--version"):
        assert word in result.stdout
    for scheme in available_backends():  # every registered backend is listed with its URL
        assert f"{scheme}://" in result.stdout, f"--help does not list {scheme}://"


def test_version() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "--version"], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0 and result.stdout.strip() == f"polybroker {broker.__version__}"


def test_demo_walks_through_ack_nack_and_redelivery() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "broker.cli", "demo"], capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "nack()" in out and "attempt 2" in out and "ack deadline" in out
    assert "none was lost" in out


def test_publish_then_consume_json_lines(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"inmem://cli-{uuid.uuid4().hex}"
    lines = '{"data": "one", "key": "k"}\n\n{"data": {"n": 2}, "attributes": {"a": "b"}}\n'
    assert run(["publish", url, "t", "--json", "-a", "src=cli"], lines, monkeypatch) == 0
    assert run(["publish", url, "t", "--key", "plain"], "three\n", monkeypatch) == 0
    assert run(["consume", url, "t", "--count", "3", "--json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [d["data"] for d in out] == ["one", '{"n": 2}', "three"]
    assert out[0]["key"] == "k" and out[0]["attributes"] == {"src": "cli"}
    assert out[1]["attributes"] == {"src": "cli", "a": "b"}
    assert out[2]["key"] == "plain"
    assert run(["consume", url, "t", "--timeout", "0.1"]) == 0  # all were acked: nothing left


def test_user_errors_are_reported_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["consume", "nosuch://x", "t"]) == 2
    assert "no backend is registered" in capsys.readouterr().err
    assert run(["publish", "inmem://x", "t", "--json"], "not json\n", monkeypatch) == 2
    assert "not JSON" in capsys.readouterr().err
    assert run(["publish", "inmem://x", "t", "-a", "novalue"], "", monkeypatch) == 2
    assert run(["dev", "inmem"]) == 2
    assert "no local development server" in capsys.readouterr().err


def test_backends_lists_what_is_registered(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["backends"]) == 0
    assert "inmem" in capsys.readouterr().out


def test_queue_tracker_needs_a_backend_with_a_marker_queue(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["queue", "tracker", "inmem://x", "orders"]) == 2
    assert "no marker queue" in capsys.readouterr().err


def test_queue_tracker_go_fleet_refuses_a_group_of_its_own(capsys: pytest.CaptureFixture[str]) -> None:
    # Checked before anything reaches a broker (none listens on port 1).
    args = ["queue", "tracker", "kafka://127.0.0.1:1", "orders", "--go-fleet", "--group", "mine"]
    assert run(args) == 2
    assert "kafka-mq-redelivery" in capsys.readouterr().err


class _TrackerBackend:
    """A stand-in backend whose ``queue_tracker`` runs the real tracker on a broken log."""

    name = "fake"

    def __init__(self, log: object, fail: bool) -> None:
        self.log = log
        self.fail = fail
        self.trackers: list[object] = []
        self.options: list[dict[str, object]] = []

    def queue_tracker(self, topic: str, **options: object) -> object:
        from broker.backends.kafka.queue import RedeliveryTracker
        from broker.backends.kafka.queue.settings import queue_settings_for_topic

        self.options.append(dict(options))
        tracker = RedeliveryTracker(
            self.log,  # type: ignore[arg-type]
            queue_settings_for_topic(topic, dict(options)),  # as the Kafka backend builds it
        )
        tracker.restart_backoff = 0.01
        self.trackers.append(tracker)
        return tracker

    async def __aenter__(self) -> _TrackerBackend:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        close = getattr(self.log, "close", None)
        if close is not None:
            await close()


class _UnreachableLog:
    """Every request fails as if the broker were down for good."""

    async def close(self) -> None:
        pass

    def __getattr__(self, name: str) -> object:
        async def fail(*args: object, **kwargs: object) -> None:
            from broker.errors import ConnectionFailed

            raise ConnectionFailed("broker unreachable")

        return fail


def test_queue_tracker_exits_non_zero_when_the_broker_stays_unreachable(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker.cli import commands

    backend = _TrackerBackend(_UnreachableLog(), fail=True)
    monkeypatch.setattr(commands, "_connect", lambda url: backend)
    assert run(["queue", "tracker", "fake://x", "orders", "--max-failures", "3"]) == 1
    err = capsys.readouterr().err
    assert "failed 3 times in a row; giving up" in err and "broker unreachable" in err


def test_queue_tracker_exits_non_zero_when_the_tracker_stops_on_its_own(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker.backends.inmem import InmemBackend
    from broker.cli import commands

    inmem = broker.connect(f"inmem://cli-tracker-{uuid.uuid4().hex}")
    assert isinstance(inmem, InmemBackend)
    log = inmem.log()

    class ClosingBackend(_TrackerBackend):
        def queue_tracker(self, topic: str, **options: object) -> object:
            tracker = super().queue_tracker(topic, **options)

            async def closed(*args: object) -> None:
                from broker.errors import ClosedError

                raise ClosedError("the log is closed")

            tracker._create_topics = closed  # type: ignore[attr-defined]
            return tracker

    monkeypatch.setattr(commands, "_connect", lambda url: ClosingBackend(log, fail=False))
    assert run(["queue", "tracker", "fake://x", "orders"]) == 1
    assert "stopped on its own" in capsys.readouterr().err


def test_queue_tracker_rejects_a_negative_failure_limit(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from broker.cli import commands

    monkeypatch.setattr(commands, "_connect", lambda url: _TrackerBackend(_UnreachableLog(), fail=True))
    assert run(["queue", "tracker", "fake://x", "orders", "--max-failures", "-1"]) == 2
    assert "--max-failures" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("flags", "options", "group"),
    [
        (["--go-fleet"], {"go_fleet": True}, "kafka-mq-redelivery"),
        (["--group", "mine"], {"tracker_group": "mine"}, "mine"),
        ([], {}, "kafka-mq-redelivery-orders.markers"),
    ],
)
def test_queue_tracker_passes_go_fleet_and_group_to_the_tracker_config(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    flags: list[str],
    options: dict[str, object],
    group: str,
) -> None:
    from broker.cli import commands

    backend = _TrackerBackend(_UnreachableLog(), fail=True)
    monkeypatch.setattr(commands, "_connect", lambda url: backend)
    assert run(["queue", "tracker", "fake://x", "orders", "--max-failures", "1", *flags]) == 1
    assert backend.options == [options]
    [tracker] = backend.trackers
    config = tracker.config  # type: ignore[attr-defined]
    assert config.tracker_group == group
    assert config.go_fleet is bool(options.get("go_fleet"))
    assert config.marker_format == ("per-message" if config.go_fleet else "batched")
    assert f"group {group!r}" in capsys.readouterr().err


def test_consume_stops_gracefully_on_sigterm() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "broker.cli", "consume", f"inmem://cli-{uuid.uuid4().hex}", "t"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert process.stderr is not None
        assert "consuming" in process.stderr.readline()
        time.sleep(0.3)  # broker.run has installed its signal handlers
        process.send_signal(signal.SIGTERM)
        _, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    assert "consumed 0 message(s)" in err


def test_consume_count_with_concurrency_prints_exactly_count(capsys: pytest.CaptureFixture[str]) -> None:
    url = f"inmem://cli-{uuid.uuid4().hex}"
    assert run(["publish", url, "t"], "".join(f"m{i}\n" for i in range(10)), pytest.MonkeyPatch()) == 0
    assert run(["consume", url, "t", "--count", "4", "--concurrency", "3", "--drain-timeout", "5"]) == 0
    printed = capsys.readouterr().out.split()
    assert len(printed) == 4
    assert run(["consume", url, "t", "--timeout", "0.2"]) == 0
    rest = capsys.readouterr().out.split()
    assert sorted(printed + rest) == sorted(f"m{i}" for i in range(10))  # the extra taken were nacked
