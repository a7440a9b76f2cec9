"""The examples run as documented."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_quickstart_runs_on_the_in_memory_broker() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "quickstart.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "handled 10 payments: [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]" in result.stdout


def test_typed_example_runs_and_dead_letters_the_bad_payload() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "typed.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "handled: 1:card:9.5, 2:transfer:20.0" in result.stdout
    assert 'dead-lettered: {"id": "oops"} reason: non-retryable DecodeError' in result.stdout
