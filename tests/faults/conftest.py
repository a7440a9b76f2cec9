"""Fault-suite wiring: the full matrix runs under ``-m faults`` only; the table is printed at the end.

Cells marked ``faults_full`` are deselected unless the ``-m`` expression names ``faults``
(``make faults``), so a plain ``pytest`` or ``make test`` runs only the short subset. Every fault
test is in one file, so the root conftest puts them in one xdist group: they never run in parallel.
"""

from __future__ import annotations

import pytest

from tests.faults.nemesis import RunResult

#: Results of this session's fault runs, printed as a table by ``pytest_terminal_summary``.
RESULTS: list[RunResult] = []


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Deselect the full matrix unless ``-m`` mentions ``faults``."""
    if "faults" in (config.option.markexpr or ""):
        return
    keep, drop = [], []
    for item in items:
        (drop if item.get_closest_marker("faults_full") else keep).append(item)
    if drop:
        config.hook.pytest_deselected(items=drop)
        items[:] = keep


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter) -> None:
    """Print the backend x fault table of the runs in this session."""
    if not RESULTS:
        return
    terminalreporter.section("fault table")
    terminalreporter.write_line(
        "| backend | fault | fault s | confirmed | delivered | lost | duplicates | indeterminate | failed "
        "| recovery s | caught up s | recovered | key order | errors seen |"
    )
    terminalreporter.write_line("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r in RESULTS:
        rep = r.report
        recovery = "-" if rep.recovery is None else f"{rep.recovery:.2f}"
        caught_up = "-" if rep.caught_up is None else f"{rep.caught_up:.2f}"
        errors = ", ".join(f"{k} {v}" for k, v in sorted(rep.errors.items())) or "none"
        terminalreporter.write_line(
            f"| {r.backend} | {r.fault} | {r.fault_seconds:.1f} | {rep.confirmed} | {rep.delivered} "
            f"| {len(rep.lost)} | {rep.duplicates} | {rep.indeterminate} | {rep.failed} "
            f"| {recovery} | {caught_up} "
            f"| {'yes' if rep.recovered else 'NO'} | {rep.order_summary()} | {errors} |"
        )
