"""examples/retries.py runs as documented on the in-memory broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "retries.py"


def test_retries_example_runs_on_the_in_memory_broker() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert 'dead-lettered {"id": 99}: non-retryable Malformed' in result.stdout
    assert "paid 9 payments: [0, 1, 2, 3, 4, 5, 6, 7, 8]; retried after a failure: [0, 3, 6]" in result.stdout
    assert "exit code 0" in result.stdout
