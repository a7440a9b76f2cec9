"""Test-run wiring shared by every suite.

``make test`` runs pytest on two workers (pytest-xdist, ``--dist loadgroup``): most of the suite waits on
real servers, deadlines and redeliveries, not on the CPU. Tests are grouped so that what shares a server
stays on one worker: a folder of ``tests/integration/`` or ``tests/spark/`` (their servers and the
SparkSession are session-scoped) is one group, any other test file is one group.
"""

from __future__ import annotations

import faulthandler
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

import pytest
from _pytest.nodeid import NodeId

from tests.xdist_run import (
    REPORTED,
    WATCHDOG_DIR_ENV,
    GroupScheduling,
    mark_test,
    report_dead_worker,
    watchdog_file,
)

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

    Tests marked ``sqs_full`` (the slow part of the SQS suite) are deselected unless the ``-m``
    expression names ``sqs_full`` (``make test-sqs``).
    """
    if "sqs_full" not in (config.option.markexpr or ""):  # make test-sqs runs them (-m names it)
        dropped = [item for item in items if item.get_closest_marker("sqs_full")]
        if dropped:
            config.hook.pytest_deselected(items=dropped)
            items[:] = [item for item in items if not item.get_closest_marker("sqs_full")]
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


#: Seconds past a test's own timeout after which the watchdog below ends the worker (the variable is
#: for tests/unit/test_xdist_run.py, which runs a hanging test).
_WATCHDOG_GRACE = float(os.environ.get("POLYBROKER_WATCHDOG_GRACE", "60"))


def _timeout_of(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    if marker is not None and marker.args:
        return float(marker.args[0])
    return float(item.config.getini("timeout") or 120)


_watchdog: list[IO[str]] = []  # this process's watchdog file, once made


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """A watchdog behind pytest-timeout: a test still running long after its timeout is stuck where
    the timeout's SIGALRM cannot reach it (a blocking C call on the main thread, or the timeout's
    exception swallowed by an event-loop callback). Dump every thread's stack and end the worker:
    pytest-xdist reports the test as crashed and the run goes on, instead of hanging CI until it is
    killed with no trace of where it stood. The dump goes to a file the controller prints
    (``tests/xdist_run.py``): file descriptor 2 is pytest's capture file while a test runs."""
    if not _watchdog:
        _watchdog.append(watchdog_file())
        if os.environ.get("PYTEST_XDIST_WORKER"):
            # a fatal signal (a native crash) dumps every thread's stack into the same file, which
            # the controller prints when the worker dies: pytest's own dump goes to the worker's
            # stderr, lost in the middle of a long CI log
            faulthandler.enable(file=_watchdog[0], all_threads=True)
    seconds = _timeout_of(item) + _WATCHDOG_GRACE
    mark_test(_watchdog[0], item.nodeid, seconds)
    faulthandler.dump_traceback_later(seconds, exit=True, file=_watchdog[0])
    try:
        yield
    finally:
        faulthandler.cancel_dump_traceback_later()


def pytest_configure(config: pytest.Config) -> None:
    """On the controller of an xdist run: a folder for the workers' watchdog files (they inherit
    its name through the environment)."""
    if os.environ.get("PYTEST_XDIST_WORKER") is None and getattr(config.option, "numprocesses", None):
        os.environ[WATCHDOG_DIR_ENV] = tempfile.mkdtemp(prefix="polybroker-watchdog-")


def pytest_unconfigure(config: pytest.Config) -> None:
    """Remove this process's watchdog file, and on the controller the workers' folder."""
    for file in _watchdog:
        file.close()
        Path(file.name).unlink(missing_ok=True)
    folder = os.environ.get(WATCHDOG_DIR_ENV)
    if folder and os.environ.get("PYTEST_XDIST_WORKER") is None:
        shutil.rmtree(folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True, optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` that cannot deadlock after a worker crash (``tests/xdist_run.py``)."""
    if config.getvalue("dist") == "loadgroup":
        return GroupScheduling(config, log)
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: object | None) -> None:
    """When a worker died, print its watchdog dump (or the test it died in) into the run's output."""
    if error is None:
        return
    reporter = node.config.pluginmanager.get_plugin("terminalreporter")
    write = reporter.write_line if reporter is not None else print
    report_dead_worker(str(node.gateway.id), write)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The dead workers' reports again at the end, where a CI log's tail shows them."""
    if REPORTED:
        terminalreporter.section("workers that died")
        for report in REPORTED:
            terminalreporter.write_line(report)
