"""examples/fastapi_app.py through a real uvicorn (0.54): a request publishes, the app's subscriber
handles it, and SIGTERM to uvicorn drains the subscriber (the order in hand is finished) and the server
shuts down cleanly. A clean SIGTERM shutdown of uvicorn 0.54 ends by raising SIGTERM again with the
default handler (as tests/integration/test_hosted_run.py notes), so the exit status is -SIGTERM (143 in
a shell), with "Application shutdown complete." and no error logged.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="uvicorn (the test extra) is not installed")
pytest.importorskip("fastapi", reason="fastapi (the test extra) is not installed")

ROOT = Path(__file__).resolve().parents[2]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _post(port: int, body: dict[str, object], deadline: float) -> dict[str, object]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/orders",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    while True:
        try:
            with urllib.request.urlopen(request, timeout=10) as answer:
                assert answer.status == 202
                result: dict[str, object] = json.loads(answer.read())
                return result
        except (ConnectionError, urllib.error.URLError):
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)  # uvicorn is still starting


def test_a_request_publishes_the_subscriber_handles_it_and_sigterm_drains() -> None:
    """POST /orders -> the subscriber takes the order; SIGTERM while it is in hand: it is finished
    (fulfilled) before uvicorn's clean shutdown completes."""
    port = _free_port()
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {**os.environ, "PYTHONPATH": path, "FULFIL_SECONDS": "1", "POLYBROKER_URL": "inmem://fastapi-test"}
    server = subprocess.Popen(
        [sys.executable, "-m", "uvicorn", "--app-dir", str(ROOT / "examples"), "fastapi_app:api",
         "--host", "127.0.0.1", "--port", str(port), "--log-level", "info", "--no-access-log"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert server.stdout is not None
        assert _post(port, {"id": 7, "item": "book"}, time.monotonic() + 60) == {"accepted": 7}
        assert server.stdout.readline().strip() == "fulfilling 7 book"  # the subscriber has it
        server.send_signal(signal.SIGTERM)
        assert server.wait(timeout=60) == -signal.SIGTERM  # uvicorn's clean end (see the docstring)
        assert server.stdout.read().splitlines() == ["fulfilled 7 book"]  # drained, not cut off
        assert server.stderr is not None
        log = server.stderr.read()
        assert "Application shutdown complete." in log and "ERROR" not in log, log
    finally:
        if server.poll() is None:
            server.kill()
            server.wait()
