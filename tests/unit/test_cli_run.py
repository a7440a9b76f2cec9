"""``broker run``: targets, the in-memory broker's one-worker limit, and ``--reload``.

The drain of two worker processes on a real server is ``tests/integration/jetstream/test_run_workers.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from broker.cli.main import main
from broker.cli.running import check_workers, load_app
from broker.errors import ConfigError

ROOT = Path(__file__).resolve().parents[2]

#: An app whose startup and shutdown hooks append a line to $RUN_LOG, tagged with VERSION.
RELOADED_APP = """
import os
import broker

VERSION = {version}
app = broker.App()


@app.subscriber("jobs", "runner")
async def job(data: bytes) -> None: ...


@app.on_startup
def started() -> None:
    with open(os.environ["RUN_LOG"], "a") as log:
        log.write(f"started {{VERSION}} {{os.getpid()}}\\n")


@app.on_shutdown
def stopped() -> None:
    with open(os.environ["RUN_LOG"], "a") as log:
        log.write(f"stopped {{VERSION}} {{os.getpid()}}\\n")
"""


def _env(**extra: str) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "PYTHONPATH": path, **extra}


def _wait_for(log: Path, lines: int, process: subprocess.Popen[str], timeout: float = 60.0) -> list[str]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = log.read_text().splitlines() if log.exists() else []
        if len(found) >= lines:
            return found
        assert process.poll() is None, f"broker run exited with {process.returncode}"
        time.sleep(0.05)
    raise AssertionError(f"{lines} lines expected in {log}, got {found}")


def test_two_workers_on_the_in_memory_broker_are_a_config_error(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """inmem:// lives in one process: --workers 2 is refused before any worker starts (exit 2)."""
    monkeypatch.delenv("POLYBROKER_URL", raising=False)
    app = load_app(f"{ROOT}/examples/order_service.py:app")
    with pytest.raises(ConfigError, match="--workers 2 needs a broker the worker processes share"):
        check_workers(app, 2)
    code = main(["run", f"{ROOT}/examples/order_service.py:app", "--workers", "2", "--url", "inmem://two"])
    assert code == 2
    assert "ConfigError: --workers 2" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("target", "error"),
    [
        (f"{ROOT}/examples/missing.py:app", "no such file"),
        (f"{ROOT}/examples/order_service.py:stock", "is dict, not a broker.App"),
        ("no_such_module_here:app", "no module named 'no_such_module_here'"),
        (f"{ROOT}/examples/order_service.py:not-a-name", "is not an attribute name"),
    ],
)
def test_a_bad_target_is_a_config_error(target: str, error: str) -> None:
    """A target that names no App says why, as a ConfigError."""
    with pytest.raises(ConfigError, match=error):
        load_app(target)


def test_url_on_the_command_line_overrides_the_environment_and_the_code(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--url replaces POLYBROKER_URL and the URL the app's code names (shown here by asyncapi)."""
    monkeypatch.setenv("POLYBROKER_URL", "nats://127.0.0.1:4222")
    assert main(["asyncapi", f"{ROOT}/examples/order_service.py:app", "--url", "kafka://127.0.0.1:9092"]) == 0
    out = capsys.readouterr().out
    assert '"protocol": "kafka"' in out and "nats" not in out


def test_reload_drains_then_starts_the_new_code(tmp_path: Path) -> None:
    """A changed file restarts the worker: the old one drains and stops, then the new code starts;
    SIGTERM then stops the new one, exit status 0."""
    source = tmp_path / "reloaded.py"
    source.write_text(RELOADED_APP.format(version=1))
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "run", f"{source}:app", "--reload", "--url", "inmem://reload"],
        env=_env(RUN_LOG=str(log)),
        cwd=tmp_path,
        text=True,
    )
    try:
        first = _wait_for(log, 1, process)
        assert first[0].startswith("started 1 ")
        source.write_text(RELOADED_APP.format(version=2))
        lines = _wait_for(log, 3, process)
        old_pid = first[0].split()[2]
        assert lines[1] == f"stopped 1 {old_pid}"
        assert lines[2].startswith("started 2 ") and lines[2].split()[2] != old_pid
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        assert log.read_text().splitlines()[3] == f"stopped 2 {lines[2].split()[2]}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


#: An app whose one message is in hand for a minute: only a second signal ends its drain early.
STUCK_APP = """
import asyncio
import broker

app = broker.App()


@app.subscriber("slow", "runner")
async def slow(data: bytes) -> None:
    print("took", flush=True)
    await asyncio.sleep(60)
    print("done", flush=True)


@app.on_startup
async def publish() -> None:
    await app.publisher().topic("slow").publish(broker.OutboundMessage(b"one"))
"""


def test_a_second_signal_cuts_the_workers_drain_short(tmp_path: Path) -> None:
    """SIGTERM starts the drain (the handler has a minute left, the drain allows two); a second SIGTERM
    cuts it short: the supervisor and its worker exit at once, the handler never finishes."""
    source = tmp_path / "stuck.py"
    source.write_text(STUCK_APP)
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "run", f"{source}:app", "--reload", "--url", "inmem://stuck",
         "--drain-timeout", "120"],
        env=_env(), cwd=tmp_path, stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert process.stdout is not None
        assert process.stdout.readline() == "took\n"
        process.send_signal(signal.SIGTERM)
        time.sleep(0.3)  # the worker is draining: its handler has a minute to go
        assert process.poll() is None
        process.send_signal(signal.SIGTERM)
        process.wait(timeout=30)  # far less than the handler's minute or the drain's two
        assert process.stdout.read() == ""  # "done" never printed: the handler was cut off
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()


def test_a_worker_whose_supervisor_is_killed_drains_and_exits(tmp_path: Path) -> None:
    """SIGKILL to the supervisor (no signal to hand on): its worker notices, drains (its shutdown
    hook runs) and exits instead of running on unsupervised."""
    source = tmp_path / "orphaned.py"
    source.write_text(RELOADED_APP.format(version=1))
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "run", f"{source}:app", "--reload", "--url", "inmem://orphan"],
        env=_env(RUN_LOG=str(log)),
        cwd=tmp_path,
        text=True,
    )
    worker = 0
    try:
        worker = int(_wait_for(log, 1, process)[0].split()[2])
        process.kill()
        process.wait(timeout=30)
        deadline = time.monotonic() + 30
        while _alive(worker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(worker), "the worker runs on without its supervisor"
        assert log.read_text().splitlines()[1] == f"stopped 1 {worker}"
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        if worker and _alive(worker):
            os.kill(worker, signal.SIGKILL)


def _alive(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie, exited and not yet reaped by its new parent, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def test_with_reload_a_failed_worker_starts_again_on_the_next_change(tmp_path: Path) -> None:
    """--reload: a worker whose code fails at startup is not the end of the run; the fixed file starts it."""
    source = tmp_path / "broken.py"
    failing = (
        RELOADED_APP.format(version=1)
        + '\n@app.on_startup\ndef fail() -> None:\n    raise RuntimeError("bug")\n'
    )
    source.write_text(failing)
    log = tmp_path / "run.log"
    process = subprocess.Popen(
        [sys.executable, "-m", "broker", "run", f"{source}:app", "--reload", "--url", "inmem://broken"],
        env=_env(RUN_LOG=str(log)),
        cwd=tmp_path,
        text=True,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert _wait_for(log, 1, process)[0].startswith("started 1 ")  # then fail() raises
        time.sleep(0.5)
        assert process.poll() is None  # the supervisor waits for a change
        source.write_text(RELOADED_APP.format(version=2))
        assert _wait_for(log, 2, process)[1].startswith("started 2 ")
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
