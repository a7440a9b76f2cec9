"""examples/testing/: the order service's test module passes with the plugin, in order, reversed, and
20 times over in a random order (every test 20 times, all 140 runs shuffled together)."""

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

#: Every test of the module 20 times (as pytest-repeat does: a parametrized fixture), then all the
#: runs shuffled with a seed the run prints, so a failure can be replayed with POLYBROKER_SHUFFLE_SEED.
SHUFFLED_ROUNDS = """
import os
import random

import pytest

ROUNDS = 20
SEED = int(os.environ.get("POLYBROKER_SHUFFLE_SEED") or random.randrange(2**32))


@pytest.fixture
def _shuffled_round(request):
    return request.param


def pytest_generate_tests(metafunc):
    metafunc.fixturenames.append("_shuffled_round")
    metafunc.parametrize("_shuffled_round", range(ROUNDS), indirect=True)


def pytest_collection_modifyitems(items):
    random.Random(SEED).shuffle(items)


def pytest_report_header(config):
    return f"shuffled with POLYBROKER_SHUFFLE_SEED={SEED}"
"""


@pytest.mark.parametrize("order", ["as written", "reversed", "20 times shuffled"])
def test_the_example_test_module_passes(order: str, tmp_path: Path) -> None:
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--strict-markers", str(EXAMPLE)]
    expected = "7 passed"
    if order == "reversed":
        (tmp_path / "reverse_order.py").write_text(REVERSED)
        args += ["-p", "reverse_order"]
    elif order == "20 times shuffled":
        (tmp_path / "shuffled_rounds.py").write_text(SHUFFLED_ROUNDS)
        args += ["-p", "shuffled_rounds"]
        expected = "140 passed"
    result = subprocess.run(
        args,
        cwd=EXAMPLE.parents[1],
        capture_output=True,
        text=True,
        timeout=100,
        env={**os.environ, "PYTHONPATH": str(tmp_path), "POLYBROKER_TEST_URL": ""},
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert expected in result.stdout, result.stdout + result.stderr
