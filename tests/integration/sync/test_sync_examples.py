"""The blocking API's examples, run: the Flask view (test client and gunicorn) and the SIGTERM worker."""

from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType

import pytest

import broker.sync
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer, free_port
from tests.integration.jetstream.server import running_nats_server

ROOT = Path(__file__).resolve().parents[3]
EXAMPLES = ROOT / "examples" / "blocking"


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


def _flask_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("blocking_flask_app", EXAMPLES / "flask_app.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("where", ["inmem", "nats"])
def test_flask_view_publishes_an_order_per_request(where: str, request: pytest.FixtureRequest) -> None:
    url = f"inmem://flask-{uuid.uuid4().hex}"
    if where == "nats":
        url = request.getfixturevalue("nats_server").url
    topic, subscription = f"orders-{uuid.uuid4().hex[:8]}", "check"
    app = _flask_example().create_app(url, topic)
    backend: broker.sync.SyncBackend = app.extensions["broker"]
    with backend, backend.messages(topic, subscription) as orders:
        client = app.test_client()
        for i in range(5):
            response = client.post("/orders", json={"id": i, "item": "tea"})
            assert response.status_code == 202 and response.get_json()["id"] == i
        assert client.post("/orders", json={"item": "no id"}).status_code == 400
        got = sorted(json.loads(orders.next_message(timeout=10).data)["id"] for _ in range(5))
        assert got == [0, 1, 2, 3, 4]


def test_gunicorn_two_preforked_workers_both_publish(nats_server: ProcessServer) -> None:
    port = free_port()
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    with broker.sync.connect(nats_server.url) as backend, backend.messages(topic, "check") as orders:
        server = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "gunicorn",
                "-w",
                "2",
                "--preload",
                "-b",
                f"127.0.0.1:{port}",
                "--chdir",
                str(EXAMPLES),
                "flask_app:app",
            ],
            env={**os.environ, "BROKER_URL": nats_server.url, "ORDERS_TOPIC": topic, "PYTHONPATH": str(ROOT)},
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        try:
            pids: set[int] = set()
            sent = 0
            deadline = time.perf_counter() + 60
            while (len(pids) < 2 or sent < 10) and time.perf_counter() < deadline:
                try:
                    body = json.dumps({"id": sent}).encode()
                    req = urllib.request.Request(f"http://127.0.0.1:{port}/orders", data=body, method="POST")
                    req.add_header("Content-Type", "application/json")
                    req.add_header("Connection", "close")
                    with urllib.request.urlopen(req, timeout=10) as response:
                        pids.add(json.loads(response.read())["pid"])
                        sent += 1
                except OSError:
                    time.sleep(0.1)  # not listening yet
            assert len(pids) == 2, f"answers came from workers {pids} only"
            got = [orders.next_message(timeout=10) for _ in range(sent)]
            assert sorted(json.loads(m.data)["id"] for m in got) == list(range(sent))
            assert {int(m.attributes["pid"]) for m in got} == pids
        finally:
            server.send_signal(signal.SIGTERM)
            _, err = server.communicate(timeout=30)
        assert server.returncode == 0, err.decode()[-2000:]


def test_worker_consumes_with_a_for_loop_and_stops_on_sigterm(nats_server: ProcessServer) -> None:
    topic = f"orders-{uuid.uuid4().hex[:8]}"
    worker = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "worker.py"), nats_server.url, topic, "workers"],
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline().strip() == "worker ready"
        with broker.sync.connect(nats_server.url) as backend:
            backend.publisher().topic(topic).batch_publish(
                *(OutboundMessage(json.dumps({"id": i}).encode()) for i in range(5))
            )
        handled = [worker.stdout.readline().strip() for _ in range(5)]
        assert sorted(handled) == sorted(f"handled order {i}" for i in range(5))
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    finally:
        if worker.poll() is None:
            worker.kill()
    assert worker.returncode == 0, err
    assert out.strip().endswith("worker stopped")
