"""Test-run wiring shared by every suite.

``make test`` runs pytest on two workers (pytest-xdist, ``--dist loadgroup``): most of the suite waits on
real servers, deadlines and redeliveries, not on the CPU. Tests are grouped so that what shares a server
stays on one worker: a folder of ``tests/integration/`` or ``tests/spark/`` (their servers and the
SparkSession are session-scoped) is one group, any other test file is one group.
"""

from __future__ import annotations

import faulthandler
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from _pytest.nodeid import NodeId

_TESTS = Path(__file__).resolve().parent


def _group(path: Path) -> str:
    parts = path.relative_to(_TESTS).parts
    if parts[0] == "spark":
        return "spark"
    if parts[0] == "integration" and len(parts) > 2:
        return "/".join(parts[:2])
    return "/".join(parts)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Mark every test with its xdist group (ignored when pytest runs without workers).

    pytest-xdist's ``loadgroup`` reads the group from a ``@group`` suffix of the node id, which it
    adds by setting ``item._nodeid``; pytest 9 builds the node id from ``item._id`` instead, so that
    suffix never reaches the scheduler and every group is split over both workers. On a worker the
    suffix is added here the way pytest 9 reads it.
    """
    # On a worker, xdist sets ``loadgroup`` from the controller's ``--dist`` (and ``dist`` to "no").
    loadgroup = bool(getattr(config.option, "loadgroup", False))
    on_worker = loadgroup and os.environ.get("PYTEST_XDIST_WORKER") is not None
    for item in items:
        path = Path(str(item.path)).resolve()
        if _TESTS in path.parents:
            group = _group(path)
            item.add_marker(pytest.mark.xdist_group(group))
            if on_worker and "@" not in item.nodeid:
                item._id = NodeId.parse(f"{item.nodeid}@{group}")  # type: ignore[attr-defined]


#: Seconds past a test's own timeout after which the watchdog below ends the worker.
_WATCHDOG_GRACE = 180.0


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 120)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A watchdog behind pytest-timeout: a test still running long after its timeout is stuck where
    the timeout's SIGALRM cannot reach it (a blocking C call on the main thread, or the timeout's
    exception swallowed by an event-loop callback). Dump every thread's stack and end the worker:
    pytest-xdist reports the test as crashed and the run goes on, instead of hanging CI until it is
    killed with no trace of where it stood."""
    faulthandler.dump_traceback_later(_timeout_of(item) + _WATCHDOG_GRACE, exit=True, file=sys.__stderr__)
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()
