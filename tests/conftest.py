"""Test-run wiring shared by every suite.

``make test`` runs pytest on two workers (pytest-xdist, ``--dist loadgroup``): most of the suite waits on
real servers, deadlines and redeliveries, not on the CPU. Tests are grouped so that what shares a server
stays on one worker: a folder of ``tests/integration/`` or ``tests/spark/`` (their servers and the
SparkSession are session-scoped) is one group, any other test file is one group.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_TESTS = Path(__file__).resolve().parent


def _group(path: Path) -> str:
    parts = path.relative_to(_TESTS).parts
    if parts[0] == "spark":
        return "spark"
    if parts[0] == "integration" and len(parts) > 2:
        return "/".join(parts[:2])
    return "/".join(parts)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark every test with its xdist group (ignored when pytest runs without workers)."""
    for item in items:
        path = Path(str(item.path)).resolve()
        if _TESTS in path.parents:
            item.add_marker(pytest.mark.xdist_group(_group(path)))
