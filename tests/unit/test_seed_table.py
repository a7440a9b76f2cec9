"""docs/seeds.md maps every element of the seed documents to a Python name that exists (issue 34).

Every backticked name in the table's Python column must import: a module, then attributes down
the dotted path; an attribute a class sets on its instances (``self.name = ...`` in its source)
counts. When the seed documents are at hand (``/work/shared/seeds``, or ``POLYBROKER_SEEDS``),
every function, type and method they list must appear in the table's Go column.
"""

from __future__ import annotations

import importlib
import inspect
import os
import re
from pathlib import Path
from typing import Any

import pytest

TABLE = Path(__file__).resolve().parents[2] / "docs" / "seeds.md"
SEEDS = Path(os.environ.get("POLYBROKER_SEEDS", "/work/shared/seeds"))


def rows() -> list[tuple[str, str]]:
    """``(go cell, python cell)`` of every table row."""
    out = []
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            out.append((cells[0], cells[1]))
    return out


def python_names() -> list[str]:
    names: list[str] = []
    for _, python in rows():
        assert python, "a row without a Python name"
        names += re.findall(r"`([A-Za-z_][\w.]*)`", python)
    return sorted(set(names))


def resolve(dotted: str) -> Any:
    parts = dotted.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: Any = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for position, attr in enumerate(parts[cut:], start=cut):
            if hasattr(obj, attr):
                obj = getattr(obj, attr)
                continue
            last = position == len(parts) - 1
            if last and inspect.isclass(obj) and _sets_on_instances(obj, attr):
                return obj
            raise AttributeError(f"{'.'.join(parts[:position])} has no attribute {attr!r}")
        return obj
    raise ImportError(f"no module in {dotted!r}")


def _sets_on_instances(cls: type, attr: str) -> bool:
    for klass in cls.__mro__:
        try:
            source = inspect.getsource(klass)
        except (OSError, TypeError):
            continue
        if re.search(rf"self\.{re.escape(attr)}\s*(:[^=\n]+)?=", source):
            return True
    return False


def test_the_table_has_rows_for_every_seed_document() -> None:
    text = TABLE.read_text()
    for seed in ("000_", "001_", "002_", "003_", "004_"):
        assert seed in text
    assert len(rows()) > 300


@pytest.mark.parametrize("name", python_names())
def test_every_python_name_in_the_table_exists(name: str) -> None:
    resolve(name)


def test_go_only_rows_name_an_equivalent() -> None:
    for go, python in rows():
        if python.startswith("Go-only"):
            assert "`" in python, f"{go}: a Go-only row must name its Python equivalent"


def seed_elements(text: str) -> list[str]:
    names: list[str] = []
    for line in text.splitlines():
        line = line.removeprefix("- ").strip()
        method = re.match(r"func \((?:\w+ )?\*?(\w+)\) (\w+)", line)
        plain = re.match(r"(?:func|type) (\w+)", line)
        name = f"{method.group(1)}.{method.group(2)}" if method else plain.group(1) if plain else None
        if name and name not in names:
            names.append(name)
    return names


@pytest.mark.skipif(not SEEDS.is_dir(), reason="the seed documents are not at hand")
def test_every_seed_element_has_a_row() -> None:
    go_text = "\n".join(go for go, _ in rows())
    words = set(re.findall(r"\w+", go_text))
    missing = []
    for path in sorted(SEEDS.glob("00*.txt")):
        for name in seed_elements(path.read_text()):
            owner, _, member = name.partition(".")
            covered = name in go_text or (owner in words and (not member or member in words))
            if not covered:
                missing.append(f"{path.name}: {name}")
    assert not missing, missing
