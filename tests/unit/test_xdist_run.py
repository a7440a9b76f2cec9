"""``make test``'s xdist wiring (tests/xdist_run.py, tests/conftest.py): a worker that dies does not
hang the run, its test is not run again, and the watchdog's stack dump reaches the run's output."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from collections import OrderedDict
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadGroupScheduling

from tests.xdist_run import GroupScheduling

ROOT = Path(__file__).resolve().parents[2]


class _Node:
    """What the scheduler uses of a worker: what it was sent, and whether it was shut down."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.sent: list[list[int]] = []
        self.shutting_down = False

    def send_runtest_some(self, indexes: list[int]) -> None:
        self.sent.append(list(indexes))

    def shutdown(self) -> None:
        self.shutting_down = True

    def __repr__(self) -> str:
        return self.name


def _scheduler(kind: type[Any], collection: list[str]) -> tuple[Any, _Node, _Node]:
    """A scheduler past its first distribution: ``a`` ran unit ``g1`` to the end and died in ``g2``
    (its first test done), ``b`` is on ``g3`` with one test left, ``g4`` still queued."""
    sched = kind.__new__(kind)
    sched.numnodes = 2
    sched.collection = collection
    sched.log = lambda *args: None
    a, b = _Node("a"), _Node("b")
    sched.registered_collections = {a: collection, b: collection}
    sched.assigned_work = {
        a: {"g1": {"t1@g1": True, "t2@g1": True}, "g2": {"t3@g2": True, "t4@g2": False, "t5@g2": False}},
        b: {"g3": {"t6@g3": True, "t7@g3": False}},
    }
    sched.workqueue = OrderedDict({"g4": {"t8@g4": False}})
    return sched, a, b


COLLECTION = [f"t{i}@g{g}" for i, g in [(1, 1), (2, 1), (3, 2), (4, 2), (5, 2), (6, 3), (7, 3), (8, 4)]]


def test_a_dead_worker_gives_back_only_unfinished_work_and_not_the_test_it_died_in() -> None:
    sched, a, b = _scheduler(GroupScheduling, COLLECTION)
    assert sched.remove_node(a) == "t4@g2"
    # b, down to its last test (t7), is handed g4 at once; the rest of g2 (not g1, not t4) waits
    assert b.sent == [[COLLECTION.index("t8@g4")]]
    assert dict(sched.workqueue) == {"g2": {"t3@g2": True, "t4@g2": True, "t5@g2": False}}
    sched.mark_test_complete(b, COLLECTION.index("t7@g3"))
    assert b.sent[-1] == [COLLECTION.index("t5@g2")]
    sched.mark_test_complete(b, COLLECTION.index("t8@g4"))
    sched.mark_test_complete(b, COLLECTION.index("t5@g2"))
    assert b.shutting_down, "no work left: the worker is told to finish"


def test_the_stock_scheduler_hands_out_a_finished_unit_the_deadlock_this_avoids() -> None:
    """The xdist 3.8 behaviour GroupScheduling replaces: the finished unit g1 goes back in the queue
    and reaches b as an empty list of tests. If this starts failing, xdist fixed it upstream and
    GroupScheduling may go."""
    sched, a, b = _scheduler(LoadGroupScheduling, COLLECTION)
    assert sched.remove_node(a) == "t4@g2"
    assert "g1" in sched.workqueue
    sched.mark_test_complete(b, COLLECTION.index("t7@g3"))
    assert [] in b.sent


def _run(tmp_path: Path, test_file: str, grace: float) -> subprocess.CompletedProcess[str]:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import (pytest_configure, pytest_runtest_protocol, pytest_terminal_summary,\n"
        "    pytest_testnodedown, pytest_unconfigure, pytest_xdist_make_scheduler)\n"
    )
    (tmp_path / "test_run.py").write_text(textwrap.dedent(test_file))
    (tmp_path / "pytest.ini").write_text("[pytest]\ntimeout = 1\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "POLYBROKER_WATCHDOG_GRACE": str(grace)}
    env.pop("PYTEST_XDIST_WORKER", None)
    env.pop("POLYBROKER_WATCHDOG_DIR", None)
    env.pop("PYTEST_ADDOPTS", None)
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "2", "--dist", "loadgroup", "-p", "no:cacheprovider", "-q"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=100,
    )


@pytest.mark.slow
def test_a_hung_test_is_dumped_reported_once_and_the_run_finishes(tmp_path: Path) -> None:
    result = _run(
        tmp_path,
        """
        import os, time
        import pytest

        @pytest.mark.parametrize("n", range(12))
        def test_quick(n):
            time.sleep(0.05)

        def test_hangs_where_the_timeout_cannot_reach():
            import signal
            signal.signal(signal.SIGALRM, signal.SIG_IGN)  # as if the timeout's exception were swallowed
            time.sleep(30)

        def test_dies():
            os._exit(3)

        def test_segfaults():
            import faulthandler
            faulthandler._sigsegv()  # a native crash, as a C extension's would be
        """,
        grace=2,
    )
    out = result.stdout + result.stderr
    assert "3 failed, 12 passed" in out, out  # the test a worker died in is not run again
    assert "watchdog, running: test_run.py::test_hangs_where_the_timeout_cannot_reach" in out, out
    assert 'test_run.py", line 12 in test_hangs_where_the_timeout_cannot_reach' in out, out
    assert "died without a watchdog dump; running: test_run.py::test_dies" in out, out
    assert "crashed while running 'test_run.py::test_dies'" in out, out
    summary = out[out.index("workers that died") :]
    assert "watchdog, running: test_run.py::test_hangs_where_the_timeout_cannot_reach" in summary, out
    assert "died without a watchdog dump; running: test_run.py::test_dies" in summary, out
    crash = summary[summary.index("crashed, running: test_run.py::test_segfaults") :]
    assert "Fatal Python error: Segmentation fault" in crash and "in test_segfaults" in crash, out
