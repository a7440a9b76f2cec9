"""What ``make test`` needs from pytest-xdist beyond what it does itself.

Two things, both about a worker that dies mid-run (the watchdog in ``tests/conftest.py`` ends a worker
whose test hangs past its timeout):

* :class:`GroupScheduling` — ``--dist loadgroup`` without a deadlock after a crash. xdist 3.8's
  ``LoadScopeScheduling.remove_node`` puts *every* work unit the dead worker ever had back in the
  queue, finished ones too. A finished unit handed out later sends a worker an empty list of tests;
  a worker that was holding its last test (a worker runs a test only once it knows the next one)
  then waits for more work, while the controller waits for that worker to finish a test before it
  schedules again: the run hangs until CI kills it. Here only units with tests still to run go back,
  and the test the worker died in is not run again (it is reported as crashed; a hang run twice
  costs the run twice).
* The watchdog's stack dump, which must reach the CI log: the worker's file descriptor 2 is pytest's
  capture file while a test runs, so a dump written there vanishes with the worker. The dump goes to
  a file per worker (:func:`watchdog_file`), and the controller prints it when it sees the worker
  die (:func:`report_dead_worker`).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

#: Set by the controller for its workers: the folder of their watchdog files.
WATCHDOG_DIR_ENV = "POLYBROKER_WATCHDOG_DIR"

try:
    from xdist.scheduler import LoadGroupScheduling
except ImportError:  # pytest-xdist is in the test extra; without it nothing here is used
    LoadGroupScheduling = object  # type: ignore[assignment,misc]


class GroupScheduling(LoadGroupScheduling):  # type: ignore[misc,valid-type]
    """``--dist loadgroup`` whose crash handling requeues only unfinished work (see the module)."""

    def remove_node(self, node: Any) -> str | None:
        """Forget ``node``; if it died with tests to run, return the one it died in and requeue
        the rest of its unfinished work units."""
        workload: dict[str, dict[str, bool]] = self.assigned_work.pop(node)
        unfinished = {scope: unit for scope, unit in workload.items() if not all(unit.values())}
        if not unfinished:
            return None
        crashitem = next(nodeid for unit in unfinished.values() for nodeid, done in unit.items() if not done)
        unfinished[self._split_scope(crashitem)][crashitem] = True  # reported as crashed, not run again
        self.workqueue.update({scope: unit for scope, unit in unfinished.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashitem

    def _assign_work_unit(self, node: Any) -> None:
        """Hand ``node`` the next unit that still has tests to run (none left: shut it down)."""
        for scope in [scope for scope, unit in self.workqueue.items() if all(unit.values())]:
            del self.workqueue[scope]
        if not self.workqueue:
            node.shutdown()
            return
        super()._assign_work_unit(node)


def watchdog_file() -> IO[str]:
    """This worker's watchdog file (made on first call): the watchdog dumps every thread's stack into
    it; :func:`mark_test` writes the running test's id at its top."""
    folder = Path(os.environ.get(WATCHDOG_DIR_ENV) or tempfile.gettempdir())
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    return open(folder / f"{worker}-{os.getpid()}.txt", "w+", encoding="utf-8")


def mark_test(file: IO[str], nodeid: str, timeout: float) -> None:
    """Start the watchdog file over with the test about to run."""
    file.seek(0)
    file.truncate()
    file.write(f"running: {nodeid} (watchdog at {timeout:.0f} s)\n")
    file.flush()


#: What :func:`report_dead_worker` printed this run (printed again in the run's summary).
REPORTED: list[str] = []


def report_dead_worker(worker: str, write_line: Callable[[str], None]) -> None:
    """Print and remove the watchdog files of the dead ``worker`` (an xdist id such as ``gw1``): the
    stack dump, or, when it died of something else, the test it was running."""
    folder = os.environ.get(WATCHDOG_DIR_ENV)
    if not folder:
        return
    for path in sorted(Path(folder).glob(f"{worker}-*.txt")):
        text = path.read_text(encoding="utf-8", errors="replace")
        lines = text.splitlines() or ["running: (none recorded)"]
        if len(lines) > 1 and "Fatal Python error" in text:  # a native crash: faulthandler's dump
            report = f"[{worker}] crashed, {text.rstrip()}"
        elif len(lines) > 1:  # the watchdog fired: every thread's stack follows the test id
            report = f"[{worker}] watchdog, {text.rstrip()}"
        else:
            report = f"[{worker}] died without a watchdog dump; {lines[0]}"
        REPORTED.append(report)
        write_line(report)
        path.unlink(missing_ok=True)
