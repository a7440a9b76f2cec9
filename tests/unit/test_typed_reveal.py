"""The typed API under ``mypy --strict``: the decoded type of each type kind and of unions."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

api = pytest.importorskip("mypy.api")

ROOT = Path(__file__).resolve().parents[2]
CHECKED = ROOT / "tests" / "typing" / "typed_reveal.py"


def _short(name: str) -> str:
    return re.sub(r"\b[\w.]+\.(\w+)", r"\1", name).strip('"')


def test_reveal_types_under_mypy_strict() -> None:
    expected = {
        number: line.rsplit("#", 1)[1].strip()
        for number, line in enumerate(CHECKED.read_text().splitlines(), 1)
        if "reveal_type(" in line
    }
    stdout, stderr, _ = api.run(["--strict", "--no-error-summary", "--show-absolute-path", str(CHECKED)])
    revealed: dict[int, str] = {}
    problems: list[str] = []
    for line in stdout.splitlines():
        found = re.match(r".*typed_reveal\.py:(\d+): note: Revealed type is (.*)$", line)
        if found:
            revealed[int(found[1])] = _short(found[2])
        elif ": error:" in line:
            problems.append(line)
    assert not problems, "\n".join(problems) + stderr
    assert revealed == expected
