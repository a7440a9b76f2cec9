"""The Pulsar client's own log lines go through ``logging``, rate-limited, and never hang close or exit.

The C++ client (pulsar-client) prints its log lines to the console by itself: with the broker
away, the same ``Failed to establish connection ... Connection refused`` line several times a
second. The backend hands them to the ``broker.backends.pulsar.libpulsar`` logger instead, repeats
held back. Routing the client's lines into Python has hung processes at shutdown before
(apache/pulsar#11847, apache/pulsar-client-python#116), so each case runs in a child process whose
broker is SIGKILLed while a producer and a consumer are connected: the child must close (or just
exit) in time, with nothing of the client's on its stdout or stderr.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import sys
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from broker.backends.pulsar.devserver import pulsar_lite
from tests.integration.pulsar.server import PulsarTestServer

Name = Callable[..., str]

#: Seconds the child keeps its connected producer and consumer with the broker gone.
OUTAGE = 3.0
#: Seconds the child may take from the start of ``close()`` (or of its exit) to its end.
EXIT_BUDGET = 10.0

#: A line of the C++ client's console logger:
#: ``2024-01-01 12:00:00.000 ERROR [1401] ClientConnection:485 | ...``.
RAW_SDK_LINE = re.compile(r"\d\d:\d\d:\d\d\.\d{3} +(DEBUG|INFO|WARN|ERROR) +\[\d+\] \w+:\d+ \|")
SUPPRESSED = re.compile(r"\((\d+) similar lines? suppressed\)$")
REFUSED = "Failed to establish connection"

CHILD = r"""
import asyncio, contextlib, json, logging, sys, time

import broker
from broker import OutboundMessage

config = json.loads(sys.argv[1])
handler = logging.FileHandler(config["log"])
handler.setFormatter(logging.Formatter("%(name)s %(levelname)s %(message)s"))
logging.getLogger().addHandler(handler)
logging.getLogger().setLevel(logging.DEBUG if config["level"] == "debug" else logging.INFO)


def say(word):
    sys.stdout.write(word + "\n")
    sys.stdout.flush()


async def main():
    backend = broker.connect(f"{config['url']}?sdk_log_level={config['level']}")
    stack = contextlib.AsyncExitStack()
    await backend.create_subscription(config["topic"], "sub")
    topic = backend.publisher().topic(config["topic"])
    await topic.publish(OutboundMessage(b"before"))
    consumer = await stack.enter_async_context(backend.messages(config["topic"], "sub"))
    message = await consumer.next_message()
    await message.ack()
    say("ready")
    await asyncio.get_running_loop().run_in_executor(None, sys.stdin.readline)  # the broker is dead
    await asyncio.sleep(config["outage"])
    say("closing")
    if config["close"]:
        started = time.monotonic()
        await backend.close()
        say(f"closed {time.monotonic() - started:.2f}")
        await stack.aclose()


asyncio.run(main())
say("exiting")
"""


def _sdk_lines(log: Path) -> list[tuple[str, str]]:
    """(level, message) of each line the libpulsar logger wrote to the child's log file."""
    found = []
    for line in log.read_text().splitlines():
        logger, _, rest = line.partition(" ")
        if logger == "broker.backends.pulsar.libpulsar":
            level, _, message = rest.partition(" ")
            found.append((level, message))
    return found


@pytest.mark.parametrize(
    ("close", "level"),
    [(True, "warn"), (True, "debug"), (False, "warn")],
    ids=["close", "close-debug", "exit-without-close"],
)
async def test_sdk_lines_are_logged_rate_limited_and_the_process_ends_after_the_broker_died(
    pulsar: PulsarTestServer, tmp_path: Path, name: Name, close: bool, level: str
) -> None:
    if not pulsar.lite:
        pytest.skip("needs a local pulsar-lite it can kill")
    log = tmp_path / "child.log"
    server = pulsar_lite()
    with server:
        assert server.process is not None
        config = {
            "url": server.url,
            "topic": name("sdk-log"),
            "outage": OUTAGE,
            "close": close,
            "level": level,
            "log": str(log),
        }
        child = await asyncio.create_subprocess_exec(
            sys.executable,
            "-c",
            CHILD,
            json.dumps(config),
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        assert child.stdin is not None and child.stdout is not None and child.stderr is not None
        stderr = asyncio.ensure_future(child.stderr.read())
        out: list[str] = []
        closing_at = None
        try:
            async with asyncio.timeout(30):
                while (line := (await child.stdout.readline()).decode()) != "ready\n":
                    assert line, f"the child ended before it was ready: {await stderr!r}"
                    out.append(line)
            os.killpg(server.process.pid, signal.SIGKILL)  # no goodbye to the client
            server.process.wait()
            child.stdin.write(b"go\n")
            await child.stdin.drain()
            async with asyncio.timeout(OUTAGE + 30):
                while (line := (await child.stdout.readline()).decode()) != "closing\n":
                    assert line, f"the child ended before closing: {await stderr!r}"
                    out.append(line)
            closing_at = time.monotonic()
            try:
                async with asyncio.timeout(EXIT_BUDGET):
                    rest = (await child.stdout.read()).decode()
                    await child.wait()
            except TimeoutError:
                pytest.fail(f"the child did not end within {EXIT_BUDGET} s of closing (it hangs)")
            ended = time.monotonic() - closing_at
        finally:
            if child.returncode is None:
                child.kill()
                await child.wait()
        errors = (await stderr).decode()
    out += rest.splitlines(keepends=True)
    printed = "".join(out)
    assert child.returncode == 0, f"exit status {child.returncode}; stdout:\n{printed}\nstderr:\n{errors}"
    assert ended < EXIT_BUDGET
    assert "exiting\n" in out
    if close:
        assert any(line.startswith("closed ") for line in out), printed
    raw = [line for line in (printed + errors).splitlines() if RAW_SDK_LINE.search(line)]
    assert not raw, "the client wrote to the console:\n" + "\n".join(raw)

    lines = _sdk_lines(log)
    refused = [message for _, message in lines if REFUSED in message]
    assert refused, f"no {REFUSED!r} line was logged: {lines}"
    assert {lvl for lvl, message in lines if REFUSED in message} == {"ERROR"}
    # The outage is shorter than the repeat interval: the first line, then one summary at most.
    assert len(refused) <= 2, refused
    held = sum(int(m.group(1)) for line in refused if (m := SUPPRESSED.search(line)))
    assert 1 + held >= 3, f"the client retries several times in {OUTAGE} s: {refused}"
    if level == "warn":
        assert not [line for line in lines if line[0] in ("DEBUG", "INFO")]
    else:
        assert Counter(lvl for lvl, _ in lines)["DEBUG"] > 0
