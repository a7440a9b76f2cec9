"""The repeat limiter and the line handling of the Pulsar client's log bridge, on a fake clock;
then the bridge's pipe and thread, without a client: the test writes the client's lines itself.
"""

from __future__ import annotations

import logging
import time

import pytest

from broker.backends.pulsar.sdk_log import RepeatLimiter, SdkLogBridge, parse, suppressed, template

REFUSED = (
    "2026-11-27 11:51:54.{ms:03d} ERROR [140056605669056] ClientConnection:485 | "
    "[<none> -> pulsar://127.0.0.1:{port}] Failed to establish connection to 0.0.0.0:0: Connection refused\n"
)


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Keep(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)

    @property
    def messages(self) -> list[str]:
        return [r.getMessage() for r in self.records]


@pytest.fixture
def keep() -> Keep:
    return Keep()


def _bridge(keep: Keep, clock: Clock, level: int = logging.DEBUG) -> SdkLogBridge:
    logger = logging.Logger("test.libpulsar", level)  # not registered: no other handler sees it
    logger.addHandler(keep)
    return SdkLogBridge(logger, interval=10.0, clock=clock)


def test_the_first_line_passes_repeats_wait_a_window_and_the_next_carries_their_count() -> None:
    clock = Clock()
    limiter: RepeatLimiter[str] = RepeatLimiter(10.0, clock=clock)
    assert limiter.admit("refused", "a") == 0
    for step in range(5):
        clock.now += 1.0
        assert limiter.admit("refused", f"b{step}") is None
    assert limiter.admit("other", "c") == 0  # keys are independent
    clock.now += 5.0  # 10 s after the first line
    assert limiter.admit("refused", "d") == 5
    clock.now += 9.0  # a new window started with "d"
    assert limiter.admit("refused", "e") is None
    clock.now += 1.0
    assert limiter.admit("refused", "f") == 1
    clock.now += 10.0
    assert limiter.admit("refused", "g") == 0


def test_due_reports_held_lines_of_windows_that_are_over_and_forgets_idle_ones() -> None:
    clock = Clock()
    limiter: RepeatLimiter[str] = RepeatLimiter(10.0, clock=clock)
    limiter.admit("refused", "a")
    limiter.admit("refused", "b")
    limiter.admit("refused", "c")
    limiter.admit("quiet", "q")
    clock.now += 9.0
    assert limiter.due() == []
    clock.now += 1.0
    assert limiter.due() == [("refused", 2, "c")]
    assert len(limiter) == 1  # "quiet" held nothing back: forgotten
    clock.now += 5.0  # the summary opened a new window: a repeat within it waits again
    assert limiter.admit("refused", "d") is None
    assert limiter.due() == []
    clock.now += 5.0
    assert limiter.due() == [("refused", 1, "d")]
    clock.now += 10.0
    assert limiter.due() == []
    assert len(limiter) == 0
    assert limiter.admit("refused", "e") == 0  # forgotten: a first line again


def test_flush_reports_every_held_line_window_over_or_not() -> None:
    clock = Clock()
    limiter: RepeatLimiter[str] = RepeatLimiter(10.0, clock=clock)
    for line in ("a", "b", "c"):
        limiter.admit("x", line)
    limiter.admit("y", "alone")
    assert limiter.flush() == [("x", 2, "c")]
    assert len(limiter) == 0
    assert limiter.flush() == []


def test_the_number_of_followed_templates_is_bounded() -> None:
    clock = Clock()
    limiter: RepeatLimiter[int] = RepeatLimiter(10.0, clock=clock, max_keys=2)
    assert limiter.admit(1, "a") == 0
    assert limiter.admit(2, "b") == 0
    assert limiter.admit(1, "a") is None  # held: key 1 is busy
    assert limiter.admit(3, "c") == 0  # full, nothing idle to forget: logged, not followed
    assert limiter.admit(3, "c") == 0
    assert len(limiter) == 2
    clock.now += 10.0  # key 2 is idle and over: forgotten to make room; key 1 still holds a line
    assert limiter.admit(3, "c") == 0
    assert limiter.admit(3, "c") is None
    assert len(limiter) == 2


def test_bad_limits_are_refused() -> None:
    with pytest.raises(ValueError):
        RepeatLimiter(-1.0)
    with pytest.raises(ValueError):
        RepeatLimiter(1.0, max_keys=0)


def test_parse_template_and_suppressed() -> None:
    line = REFUSED.format(ms=573, port=34079).rstrip("\n")
    assert parse(line) == (
        logging.ERROR,
        "ClientConnection:485",
        "[<none> -> pulsar://127.0.0.1:34079] Failed to establish connection to 0.0.0.0:0: "
        "Connection refused",
    )
    assert parse("2026-11-27 11:51:54.573 WARN  [1] ProducerImpl:128 | queue full  ") == (
        logging.WARNING,
        "ProducerImpl:128",
        "queue full",
    )
    assert parse("not a line of the client") is None
    assert template("[127.0.0.1:50124 -> 127.0.0.1:6650] Reconnecting in 188 ms") == (
        "[#.#.#.#:# -> #.#.#.#:#] Reconnecting in # ms"
    )
    assert suppressed("x", 0) == "x"
    assert suppressed("x", 1) == "x (1 similar line suppressed)"
    assert suppressed("x", 7) == "x (7 similar lines suppressed)"


def test_a_burst_of_refused_connections_is_one_record_then_one_summary_per_window(keep: Keep) -> None:
    clock = Clock()
    bridge = _bridge(keep, clock)
    data = "".join(REFUSED.format(ms=i, port=6650 + i % 2) for i in range(50)).encode()
    bridge.feed(data)
    assert len(keep.records) == 1
    first = keep.records[0]
    assert first.levelno == logging.ERROR
    assert first.pulsar_source == "ClientConnection:485"  # type: ignore[attr-defined]
    assert first.getMessage().endswith("Connection refused")
    clock.now += 5.0
    bridge.report_due()
    assert len(keep.records) == 1
    clock.now += 5.0
    bridge.report_due()
    assert keep.messages[1].endswith("Connection refused (49 similar lines suppressed)")
    assert "127.0.0.1:6651" in keep.messages[1]  # the last line held back stands for them
    bridge.feed(REFUSED.format(ms=1, port=6650).encode())
    bridge.report_all()  # as at exit: what the window still holds
    assert keep.messages[2:] == [
        "[<none> -> pulsar://127.0.0.1:6650] Failed to establish connection to 0.0.0.0:0: Connection refused "
        "(1 similar line suppressed)"
    ]


def test_lines_split_across_reads_disabled_levels_and_next_lines(keep: Keep) -> None:
    clock = Clock()
    bridge = _bridge(keep, clock, level=logging.INFO)
    line = REFUSED.format(ms=1, port=6650).encode()
    bridge.feed(line[:30])
    assert keep.records == []
    bridge.feed(line[30:])
    assert len(keep.records) == 1
    debug = b"2026-11-27 11:51:54.001 DEBUG [1] ConsumerImpl:99 | Received Message ID 1:2:-1:0\n"
    bridge.feed(debug * 3)
    assert len(keep.records) == 1  # below the logger's level: neither logged nor counted
    bridge.feed(b"2026-11-27 11:51:54.001 WARN  [1] HandlerBase:1 | first line\nsecond line\n\n")
    assert [(r.levelno, r.getMessage()) for r in keep.records[1:]] == [
        (logging.WARNING, "first line"),
        (logging.WARNING, "second line"),
    ]
    bridge.report_all()
    assert len(keep.records) == 3


def test_the_thread_logs_what_is_written_to_the_pipe_and_everything_held_back_on_stop(keep: Keep) -> None:
    logger = logging.Logger("test.libpulsar.pipe", logging.DEBUG)
    logger.addHandler(keep)
    bridge = SdkLogBridge(logger)
    assert bridge.start()
    assert bridge.start()  # idempotent: one pipe, one thread
    with open(bridge.path, "w") as client:  # as the client's file logger opens it
        for port in range(20):
            client.write(REFUSED.format(ms=port, port=port))
            client.flush()
    deadline = time.monotonic() + 5
    while not keep.records and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    bridge.stop(timeout=5)
    assert time.monotonic() - started < 1
    assert [m.rsplit("]", 1)[1] for m in keep.messages] == [
        " Failed to establish connection to 0.0.0.0:0: Connection refused",
        " Failed to establish connection to 0.0.0.0:0: Connection refused (19 similar lines suppressed)",
    ]
    with open(bridge.path, "w") as client:  # after stop the thread still empties the pipe
        client.write(REFUSED.format(ms=1, port=1) * 20_000)  # more than the pipe holds
    assert len(keep.records) == 2
    bridge.stop()  # idempotent


_FORK_SCENARIO = """
import logging, os, sys
from broker.backends.pulsar.sdk_log import SdkLogBridge

logger = logging.Logger("test.libpulsar.fork", logging.DEBUG)
bridge = SdkLogBridge(logger)
assert bridge.start()
pid = os.fork()
if pid == 0:  # the child: only an exit status
    status = 1
    try:
        thread = bridge._thread
        if thread is not None and thread.is_alive():
            bridge.stop(timeout=5)
            status = 0 if bridge._flushed.is_set() else 2
    finally:
        os._exit(status)
_, status = os.waitpid(pid, 0)
assert os.waitstatus_to_exitcode(status) == 0, f"the child exited with {os.waitstatus_to_exitcode(status)}"
assert bridge._thread is not None and bridge._thread.is_alive()  # the parent's is untouched
assert not bridge._flushed.is_set()
bridge.stop(timeout=5)
assert bridge._flushed.is_set()
print("ok")
"""


def test_a_forked_child_reads_the_inherited_pipe_with_a_thread_of_its_own() -> None:
    """Run in a fresh interpreter: forking this test worker, whose other threads (SDK clients of
    earlier tests) may hold locks at the fork, can leave the child deadlocked on one of them — a
    hazard of the test's process, not of the bridge (an application forks before it starts SDKs,
    or execs)."""
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-W", "ignore::DeprecationWarning", "-c", _FORK_SCENARIO],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0 and result.stdout.strip() == "ok", result.stdout + result.stderr
