"""examples/app.py (the order service as a broker.App): its demo runs, and its test module passes."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def test_the_order_service_demo_ships_one_order_and_dead_letters_two() -> None:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / "app.py")], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    assert "shipped: ['book']; books left: 8" in result.stdout
    assert (
        "dead-lettered: ['failed 4 attempts (max_attempts=4)', 'non-retryable DecodeError']" in result.stdout
    )


def test_the_order_service_tests_pass() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_app_orders.py"],
        cwd=EXAMPLES,
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "POLYBROKER_TEST_URL": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 passed" in result.stdout, result.stdout + result.stderr
