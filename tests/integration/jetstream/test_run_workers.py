"""``broker run APP --workers 2`` on NATS JetStream: SIGTERM drains both workers, nothing is lost.

Two worker processes share one subscription (one consumer group). The handler is slow (0.3 s) and
runs four at a time per worker, so when SIGTERM comes messages are in flight in both workers. The
test counts: every handler that started finished (the drain let it), the supervisor exits 0, and
every message published is either answered on the output topic or still on the subscription, to be
delivered again.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer

ROOT = Path(__file__).resolve().parents[3]
COUNT = 60

#: The app: its topics come from its own settings in the environment (RUN_TOPIC).
APP = """
import asyncio, os, sys
import broker

TOPIC = os.environ["RUN_TOPIC"]
app = broker.App()


@app.subscriber(TOPIC, "workers", concurrency=4, publish_to=TOPIC + "-done")
async def work(data: bytes) -> bytes:
    print(f"took {data.decode()} {os.getpid()}", flush=True)
    await asyncio.sleep(0.3)
    print(f"done {data.decode()} {os.getpid()}", flush=True)
    return data
"""


async def test_sigterm_drains_two_workers_and_nothing_is_lost(
    nats_server: ProcessServer, tmp_path: Path
) -> None:
    """Both workers take messages; SIGTERM: every started handler finishes, exit 0; answered plus
    left on the subscription is every message published."""
    source = tmp_path / "app.py"
    source.write_text(APP)
    topic = f"run-{uuid.uuid4().hex[:8]}"
    backend = broker.connect(nats_server.url)
    async with backend:
        async with backend.messages(topic, "workers"), backend.messages(f"{topic}-done", "check"):
            pass  # the stream and both subscriptions exist before anything is published
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(f"m{i}".encode()) for i in range(COUNT)))
        )
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "broker", "run", f"{source}:app", "--workers", "2",
            "--url", nats_server.url,
            env={**os.environ, "PYTHONPATH": path, "RUN_TOPIC": topic},
            stdout=subprocess.PIPE,
        )  # fmt: skip
        assert process.stdout is not None
        lines: list[str] = []
        try:
            async with asyncio.timeout(60):
                while len({line.split()[2] for line in lines if line.startswith("done")}) < 2:
                    line = (await process.stdout.readline()).decode()  # until both workers answered
                    assert line, f"broker run ended early: {await process.wait()}"
                    lines.append(line)
            process.send_signal(signal.SIGTERM)
            async with asyncio.timeout(60):
                rest = await process.stdout.read()
                code = await process.wait()
        finally:
            if process.returncode is None:
                process.kill()
                await process.wait()
        lines += rest.decode().splitlines()
        took = {line.split()[1] for line in lines if line.startswith("took")}
        done = {line.split()[1] for line in lines if line.startswith("done")}
        assert code == 0
        assert took == done, f"handlers cut off by the shutdown: {took - done}"
        assert 0 < len(done) < COUNT  # the signal came mid-stream
        answered: set[str] = set()
        async with backend.messages(f"{topic}-done", "check") as outputs:
            while len(answered) < len(done):
                message = await outputs.next_message(timeout=30)
                answered.add(message.data.decode())
                await message.ack()
        assert answered == done
        left: set[str] = set()
        async with backend.messages(topic, "workers") as work:
            while len(left | done) < COUNT:
                message = await work.next_message(timeout=30)
                left.add(message.data.decode())
                await message.ack()
        assert left | done == {f"m{i}" for i in range(COUNT)}


#: An app one of whose two workers (the first to create $CRASH_FLAG) fails at startup, once the other
#: has handled a message (so it is serving, its signal handlers in place, when it is stopped).
CRASHING_APP = """
import asyncio, os
import broker

app = broker.App()
READY = os.environ["CRASH_FLAG"] + ".ready"


@app.subscriber(os.environ["RUN_TOPIC"], "workers")
async def work(data: bytes) -> None:
    print(f"serving {os.getpid()}", flush=True)
    open(READY, "w").close()


@app.on_startup
async def maybe_fail() -> None:
    try:
        os.close(os.open(os.environ["CRASH_FLAG"], os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        return
    for _ in range(600):
        if os.path.exists(READY):
            break
        await asyncio.sleep(0.05)
    raise RuntimeError("this worker fails at startup")
"""


async def test_a_worker_that_fails_stops_its_sibling_and_the_supervisor(
    nats_server: ProcessServer, tmp_path: Path
) -> None:
    """One of two workers fails while the other serves: the other is stopped (drained, exit 0) and the
    supervisor exits with the highest status, 1."""
    source = tmp_path / "crashing.py"
    source.write_text(CRASHING_APP)
    topic = f"crash-{uuid.uuid4().hex[:8]}"
    async with broker.connect(nats_server.url) as backend:
        async with backend.messages(topic, "workers"):
            pass
        await backend.publisher().topic(topic).publish(OutboundMessage(b"one"))
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)
    env = {
        **os.environ,
        "PYTHONPATH": path,
        "RUN_TOPIC": topic,
        "CRASH_FLAG": str(tmp_path / "flag"),
    }
    process = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "broker", "run", f"{source}:app", "--workers", "2", "--url", nats_server.url,
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        async with asyncio.timeout(60):
            out, err = await process.communicate()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    assert process.returncode == 1
    assert out.decode().startswith("serving ")  # the sibling ran, and was stopped
    assert "this worker fails at startup" in err.decode()
