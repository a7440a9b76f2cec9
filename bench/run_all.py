"""Run every benchmark as its docstring says and write one table: ``bench/RESULTS.md``.

``make bench`` runs this. Each script under ``bench/`` runs in turn, one at a time (they share the
machine with the brokers they start), exactly as ``python bench/NAME.py`` with its defaults; its
output is kept whole in ``bench/results/NAME.txt`` and its summary lines (ratios, targets,
percentiles) go into ``bench/RESULTS.md`` under the date, the commit and the machine. A script
that fails is reported as failed with its exit code, and the others still run.

Usage: python bench/run_all.py [--only NAME ...] [--skip NAME ...]
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH = ROOT / "bench"
#: In the order they run; the ones that start a broker of their own come after the in-process one.
SCRIPTS = (
    "inmem",
    "telemetry",
    "kafka",
    "latency",
    "kafka_queue",
    "jetstream",
    "pulsar",
    "pubsub",
    "servicebus",
    "processor",
    "processor_failover",
    "spark",
)
QUIX_PYTHON = ROOT / ".venv" / "quix" / "bin" / "python"
#: A summary line names a ratio, target or percentile, or is a table row holding a ratio (``1.05``).
SUMMARY = re.compile(r"ratio|target|p50|p99|median|best|/s|\d\.\d\d\b", re.IGNORECASE)


def machine() -> str:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return (
        f"{os.cpu_count()} CPUs {model}".strip()
        + f", Python {platform.python_version()}, {platform.system()}"
    )


def commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "describe", "--always", "--dirty"],
        capture_output=True,
        text=True,
        check=False,
    )
    return done.stdout.strip() or "unknown"


def summary(output: str) -> list[str]:
    """The lines worth a table: ratios, targets and figures, not the per-round progress."""
    lines = [line.rstrip() for line in output.splitlines()]
    return [
        line for line in lines if line and SUMMARY.search(line) and not line.lstrip().startswith("round")
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=None, help="run only these benchmarks")
    parser.add_argument("--skip", nargs="*", default=[], help="leave these out")
    args = parser.parse_args()
    chosen = [s for s in SCRIPTS if (args.only is None or s in args.only) and s not in args.skip]
    unknown = set(args.only or ()) - set(SCRIPTS)
    if unknown:
        raise SystemExit(f"no benchmark called {', '.join(sorted(unknown))}; there are {', '.join(SCRIPTS)}")
    outputs = BENCH / "results"
    outputs.mkdir(exist_ok=True)
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    sections: list[str] = []
    for name in chosen:
        print(f"== python bench/{name}.py", flush=True)
        start = time.monotonic()
        extra = ["--setup-quix"] if name == "processor" and not QUIX_PYTHON.exists() else []
        done = subprocess.run(
            [sys.executable, str(BENCH / f"{name}.py"), *extra],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=False,
        )
        minutes = (time.monotonic() - start) / 60
        output = done.stdout + (f"\n[stderr]\n{done.stderr}" if done.returncode else "")
        (outputs / f"{name}.txt").write_text(output)
        print(done.stdout, flush=True)
        status = "ok" if done.returncode == 0 else f"**failed (exit {done.returncode})**"
        lines = summary(done.stdout) if done.returncode == 0 else done.stderr.strip().splitlines()[-5:]
        body = "\n".join(lines) or "(no output)"
        sections.append(
            f"## `python bench/{name}.py` — {status}, {minutes:.1f} min\n\n```\n{body}\n```\n"
            f"(full output: `bench/results/{name}.txt`)\n"
        )
    header = (
        "# Benchmark results\n\n"
        f"- run: {started}, commit `{commit()}`\n"
        f"- machine: {machine()}\n"
        "- every script ran as its docstring says (`python bench/NAME.py`, defaults); ratios are ours "
        "over the other side, best round and median of rounds where the script alternates rounds\n\n"
    )
    (BENCH / "RESULTS.md").write_text(header + "\n".join(sections))
    print(f"wrote {BENCH / 'RESULTS.md'}")


if __name__ == "__main__":
    main()
