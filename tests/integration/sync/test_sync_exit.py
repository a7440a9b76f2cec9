"""At interpreter exit, non-waiting publishes left unflushed are counted in one line; nothing hangs."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_publishes_to_a_broker_that_is_down_are_counted_at_exit_and_the_process_ends() -> None:
    script = textwrap.dedent(
        """
        import broker.sync
        from broker import OutboundMessage
        from broker.driver.devserver import free_port
        backend = broker.sync.connect(f"kafka://127.0.0.1:{free_port()}", close_timeout=1)
        handle = backend.publisher().topic("t")
        for i in range(10):
            handle.publish_nowait(OutboundMessage(b"x"))
        """
    )
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=ROOT
    )
    assert time.perf_counter() - started < 30  # close_timeout is 1 s: generous slack for a loaded machine
    assert done.returncode == 0, done.stderr[-2000:]
    lines = [line for line in done.stderr.splitlines() if "pending at interpreter exit" in line]
    assert len(lines) == 1 and lines[0].startswith("broker.sync: 10 published messages"), done.stderr[-2000:]
