"""The peers' virtual environment: aiokafka and FastStream, pinned, beside the project's.

Peers run in their own virtualenv (``.venv/peers``), not the project's, so their dependencies
(aiokafka's own protocol stack, FastStream's pins) never touch what the tests run with. A bench
calls :func:`peer_python` once; it creates the environment on first use with the project's ``uv``
(PyPI is the only network it needs) and returns None, with the reason printed, when that is not
possible, so the bench still prints its primary ratios without the peer columns.

A peer side runs as a child process (``bench/peer_*.py`` run by the peers' Python) that times its
own loop and prints one JSON line; :func:`run_peer` returns that line as a dict.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

__all__ = ["PEERS", "peer_python", "run_peer"]

ROOT = Path(__file__).resolve().parents[1]
PEERS_PYTHON = ROOT / ".venv" / "peers" / "bin" / "python"
#: What the peers' environment holds (pinned: a peer upgrade is a deliberate change of the baseline).
PEERS = ("aiokafka==0.14.0", "faststream[kafka,nats]==0.7.8", "cramjam==2.14.0")
_STAMP = PEERS_PYTHON.parent.parent / ".peers-installed"


def peer_python(*, required: bool = False) -> Path | None:
    """The peers' Python, created and filled on first use; None (reason printed) when impossible."""
    wanted = "\n".join(PEERS)
    try:
        if not (_STAMP.exists() and _STAMP.read_text() == wanted):
            uv = ROOT / ".venv" / "bin" / "uv"
            if not PEERS_PYTHON.exists():
                subprocess.run(
                    [str(uv), "venv", "-q", "--python", sys.executable, str(PEERS_PYTHON.parent.parent)],
                    check=True,
                )
            subprocess.run(
                [str(uv), "pip", "install", "-q", "--python", str(PEERS_PYTHON), *PEERS], check=True
            )
            _STAMP.write_text(wanted)
    except (OSError, subprocess.CalledProcessError) as exc:
        if required:
            raise
        print(f"(peer columns skipped: cannot set up {PEERS_PYTHON.parent.parent}: {exc})")
        return None
    return PEERS_PYTHON


def run_peer(python: Path, script: str, *args: str, timeout: float = 900) -> dict[str, Any]:
    """Run ``bench/<script>`` with the peers' Python; its last stdout line, parsed as JSON."""
    command = [str(python), str(ROOT / "bench" / script), *args]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{script} {' '.join(args)} failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result
