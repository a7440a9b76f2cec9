"""examples/testing/: the order service's test module passes with the plugin, in order and reversed."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "testing"

REVERSED = """
def pytest_collection_modifyitems(items):
    items.reverse()
"""


@pytest.mark.parametrize("order", ["as written", "reversed"])
def test_the_example_test_module_passes(order: str, tmp_path: Path) -> None:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers", str(EXAMPLE)]
    if order == "reversed":
        (tmp_path / "reverse_order.py").write_text(REVERSED)
        args += ["-p", "reverse_order"]
    result = subprocess.run(
        args,
        cwd=EXAMPLE.parents[1],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "POLYBROKER_TEST_URL": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "7 passed" in result.stdout, result.stdout
