"""``broker.run`` inside a real uvicorn (0.54): SIGTERM to uvicorn drains the receivers, then the
server shuts down cleanly.

The ASGI app below starts two runs in its lifespan, over the in-memory broker: one the documented
hosted way (``signals=()`` and a ``stop`` event its lifespan shutdown sets), one with ``run``'s
default signals, as an application that forgot ``signals=()`` has it (its handler must hand the
signal on to uvicorn's, or uvicorn never shuts down). Every handler is still running when the
signal comes (it waits for the shutdown to begin), so a clean end means the drain let it finish.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("uvicorn", reason="uvicorn (the test extra) is not installed")

#: Handlers per run; each takes one message and holds it until the lifespan shutdown begins.
COUNT = 4

APP = """
import asyncio, json
import broker
from broker import OutboundMessage

COUNT = __COUNT__


def say(line):
    print(line, flush=True)


async def app(scope, receive, send):
    if scope["type"] != "lifespan":
        return  # no HTTP routes: the lifespan is what is tested
    await receive()  # lifespan.startup
    backend = broker.connect("inmem://hosted")
    shutting_down = asyncio.Event()
    handled = []

    async def handle(message):
        say("took " + message.data.decode())
        await shutting_down.wait()  # in flight when the signal comes: only a drain lets it finish
        await asyncio.sleep(0.05)
        handled.append(message.data.decode())
        await message.ack()

    publisher = backend.publisher()
    for topic in ("hosted", "default"):
        messages = [OutboundMessage(f"{topic}-{i}".encode()) for i in range(COUNT)]
        await publisher.topic(topic).batch_publish(*messages)
    hosted_receiver = backend.receiver("hosted", "s", concurrency=COUNT)
    default_receiver = backend.receiver("default", "s", concurrency=COUNT)
    hosted = asyncio.create_task(broker.run((hosted_receiver, handle), signals=(), stop=shutting_down))
    default = asyncio.create_task(broker.run((default_receiver, handle)))
    await send({"type": "lifespan.startup.complete"})
    await receive()  # lifespan.shutdown: uvicorn had a signal
    shutting_down.set()
    codes = await asyncio.gather(hosted, default)
    backlog = [await backend.backlog(topic, "s") for topic in ("hosted", "default")]
    say("result " + json.dumps({"codes": codes, "handled": sorted(handled), "backlog": backlog}))
    await backend.close()
    await send({"type": "lifespan.shutdown.complete"})
""".replace("__COUNT__", str(COUNT))


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_sigterm_to_uvicorn_drains_the_receivers_and_shuts_down_cleanly(tmp_path: Path) -> None:
    (tmp_path / "hosted_app.py").write_text(APP)
    command = [sys.executable, "-m", "uvicorn", "hosted_app:app", "--app-dir", str(tmp_path)]
    command += ["--host", "127.0.0.1", "--port", str(_free_port()), "--lifespan", "on"]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    server = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    lines: list[str] = []
    try:
        assert server.stdout is not None
        took = 0
        for line in server.stdout:  # every handler of both runs holds its message
            lines.append(line)
            took += line.startswith("took ")
            if took == 2 * COUNT:
                break
        assert took == 2 * COUNT, "".join(lines)
        server.send_signal(signal.SIGTERM)
        rest, _ = server.communicate(timeout=30)
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
    output = "".join(lines) + rest
    (result,) = [json.loads(line[7:]) for line in output.splitlines() if line.startswith("result ")]
    handled = [f"{topic}-{i}" for topic in ("default", "hosted") for i in range(COUNT)]
    assert result == {"codes": [0, 0], "handled": handled, "backlog": [0, 0]}, output
    assert "Application shutdown complete." in output, output
    # uvicorn 0.54 ends a clean SIGTERM shutdown by raising SIGTERM again with the default handler
    # (the exit status a process manager expects of a process it terminated), as with any app.
    assert server.returncode == -signal.SIGTERM, output
