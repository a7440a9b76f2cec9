"""The faults ("nemeses") and one fault run: workload, fault in the middle, checker verdict.

* ``pause``: SIGSTOP the server's whole process group for longer than the client's heartbeat,
  session and ack-deadline timeouts, then SIGCONT;
* ``restart``: SIGKILL the process group, then start the server again on the same port and storage;
* ``network-cut``: the server runs in a network namespace of its own; the veth pair to it is set
  down for as long as a pause lasts, then up (the server keeps running, connections are not reset);
* ``client-crash``: the publisher runs in a process of its own (batches of 20 messages) and is
  SIGKILLed mid-stream; every id it had recorded as confirmed must be delivered, and a second
  publisher carries on (so recovery is measured as for the other faults).
* ``consumer-crash`` (the backends in :data:`CONSUMER_CRASH`): a second consumer of the checker's
  subscription runs in a process of its own, competing for the messages, and is SIGKILLed
  mid-stream; what it acked counts as delivered, and everything it had received but not acked
  (handed out or still in its buffer) must come back to the checker's consumer once its ack
  deadline (SQS: the visibility timeout) has passed.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import broker
from tests.faults.servers import ControlledServer
from tests.faults.workload import (
    Delivery,
    Outcome,
    Report,
    check,
    consume,
    message_id,
    publish_at_rate,
    read_confirmed,
)

_ROOT = Path(__file__).resolve().parents[2]

__all__ = ["CONSUMER_CRASH", "FAULTS", "PAUSE_SECONDS", "RunResult", "run_fault"]

FAULTS = ("pause", "restart", "network-cut", "client-crash")

#: The backends with a ``consumer-crash`` cell too (a crashed consumer's messages come back after
#: its ack deadline: SQS's visibility timeout).
CONSUMER_CRASH = frozenset({"sqs"})

#: Messages per ``batch_publish`` call of the crashing publisher process.
CRASH_BATCH = 20

#: Seconds after the fault ends before per-key order is checked: publishes started earlier may
#: still be retried by the application (``retrying_publish``), which per-key order does not cover.
ORDER_SETTLE = 2.0

#: How long each backend's server is paused: longer than the client timeouts set in
#: tests/faults/servers.py (heartbeats, Kafka's session, the ack deadline).
PAUSE_SECONDS = {
    "kafka": 6.0,  # session_timeout 2 s, ack_deadline 3 s
    "jetstream": 8.0,  # ack_deadline 3 s, publish_timeout 5 s
    "pulsar": 12.0,  # ack_deadline 10 s (the client's floor), operation/send timeouts 5 s
    "rabbitmq": 8.0,  # heartbeat 2 s, ack_deadline 3 s
    "redis": 8.0,  # command_timeout 3 s, ack_deadline 3 s, publish_timeout 5 s
    "pubsub": 12.0,  # ack_deadline 10 s (Pub/Sub's floor)
    "servicebus": 8.0,
    "sqs": 8.0,  # ack_deadline 2 s, publish_timeout 5 s, receives of 1 s
}


@dataclass(frozen=True)
class RunResult:
    """One cell of the fault table."""

    backend: str
    fault: str
    report: Report
    fault_seconds: float
    wall_seconds: float
    #: The topic the run published to.
    topic: str = ""
    #: ``consumer-crash``: ids the killed consumer had received and not acked (each must have been
    #: delivered again).
    unacked_by_crash: frozenset[str] = frozenset()


async def run_fault(
    server: ControlledServer,
    fault: str,
    workdir: Path,
    *,
    count: int = 600,
    rate: float = 150.0,
    fault_after: float = 1.5,
    drain_timeout: float = 60.0,
) -> RunResult:
    """Run the workload against ``server`` with ``fault`` ``fault_after`` seconds into publishing."""
    started = time.monotonic()
    run = uuid.uuid4().hex[:8]
    topic, subscription = f"faults-{server.backend}-{fault}-{run}", f"checker-{run}"
    confirmed_file = workdir / f"confirmed-{run}.txt"
    outcome = Outcome()
    stop, ready = asyncio.Event(), asyncio.Event()
    backend = broker.connect(server.connect)
    try:
        consumer = asyncio.ensure_future(
            consume(backend, topic, subscription, outcome, stop, ready, **server.consumer_options)
        )
        async with asyncio.timeout(60):
            done, _ = await asyncio.wait(
                [consumer, asyncio.ensure_future(ready.wait())], return_when="FIRST_COMPLETED"
            )
        if consumer in done:
            consumer.result()  # raise why the consumer could not start
        unacked: frozenset[str] = frozenset()
        if fault == "client-crash":
            fault_start, fault_end, publisher = await _crash_a_publisher(
                server, topic, run, count, rate, fault_after, confirmed_file, workdir, outcome, backend
            )
        elif fault == "consumer-crash":
            crashing = await _ConsumerProcess.start(server, topic, subscription)
            try:
                publisher = asyncio.ensure_future(
                    publish_at_rate(backend, topic, run, count, rate, confirmed_file, outcome)
                )
                await asyncio.sleep(fault_after)
                fault_start = time.monotonic()
                unacked = await crashing.kill(outcome)
                fault_end = time.monotonic()
            finally:
                await crashing.close()
        else:
            publisher = asyncio.ensure_future(
                publish_at_rate(backend, topic, run, count, rate, confirmed_file, outcome)
            )
            await asyncio.sleep(fault_after)
            fault_start = time.monotonic()
            await _hurt_the_server(server, fault)
            fault_end = time.monotonic()
        async with asyncio.timeout(count / rate + 120):
            await publisher
        confirmed = set(read_confirmed(confirmed_file))
        deadline = time.monotonic() + drain_timeout
        while time.monotonic() < deadline and not consumer.done():
            if confirmed <= {d.id for d in outcome.deliveries}:
                break
            await asyncio.sleep(0.2)
        await asyncio.sleep(1.0)  # late redeliveries count as duplicates
        stop.set()
        async with asyncio.timeout(30):
            await asyncio.gather(consumer, return_exceptions=False)
    except BaseException:
        stop.set()
        raise
    finally:
        async with asyncio.timeout(60):
            await backend.close()
    order_from = fault_end + ORDER_SETTLE if backend.capabilities.per_key_order else None
    report = check(read_confirmed(confirmed_file), outcome, fault_end=fault_end, order_from=order_from)
    return RunResult(
        server.backend, fault, report, fault_end - fault_start, time.monotonic() - started, topic, unacked
    )


async def _hurt_the_server(server: ControlledServer, fault: str) -> None:
    if fault == "pause":
        server.pause()
        try:
            await asyncio.sleep(PAUSE_SECONDS[server.backend])
        finally:
            server.resume()
    elif fault == "network-cut":
        server.cut()
        try:
            await asyncio.sleep(PAUSE_SECONDS[server.backend])
        finally:
            server.heal()
    elif fault == "restart":
        before = server.pids()
        await asyncio.to_thread(server.restart)
        if not server.pids() or set(server.pids()) & set(before):
            raise AssertionError(f"the restart left processes {before} -> {server.pids()}")
    else:
        raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")


async def _crash_a_publisher(
    server: ControlledServer,
    topic: str,
    run: str,
    count: int,
    rate: float,
    fault_after: float,
    confirmed_file: Path,
    workdir: Path,
    outcome: Outcome,
    backend: broker.Backend,
) -> tuple[float, float, asyncio.Future[None]]:
    """Start the publisher process, SIGKILL it ``fault_after`` seconds in, then go on in-process.

    Every id the process may have published counts as published; the in-process publisher sends
    the second half of the run under a run id of its own.
    """
    config = workdir / f"publisher-{run}.json"
    config.write_text(
        json.dumps(
            {
                "connect": server.connect,
                "topic": topic,
                "run": run,
                "count": count,
                "rate": rate,
                "confirmed": str(confirmed_file),
                "batch": CRASH_BATCH,
            }
        ),
        encoding="utf-8",
    )
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "tests.faults.publisher_process",
        str(config),
        cwd=_ROOT,
        env={**os.environ, "PYTHONPATH": str(_ROOT)},
    )
    try:
        await asyncio.sleep(fault_after + 1.0)  # the process's own start-up takes about a second
        waited = time.monotonic() + 30  # more on a loaded machine: kill it mid-stream, not before
        for _ in range(300):
            if read_confirmed(confirmed_file) or process.returncode is not None or time.monotonic() > waited:
                break
            await asyncio.sleep(0.1)
        if process.returncode is not None:
            raise AssertionError(f"the publisher process ended ({process.returncode}) before the crash")
        fault_start = time.monotonic()
        process.send_signal(signal.SIGKILL)
        await process.wait()
    finally:
        if process.returncode is None:
            process.kill()
            await process.wait()
    fault_end = time.monotonic()
    outcome.published.extend(message_id(run, i) for i in range(count))
    crashed = len(read_confirmed(confirmed_file))
    if not crashed:
        raise AssertionError("the publisher process confirmed nothing before it was killed")
    second = asyncio.ensure_future(
        publish_at_rate(backend, topic, f"{run}b", count // 2, rate, confirmed_file, outcome)
    )
    return fault_start, fault_end, second


class _ConsumerProcess:
    """``broker.driver.testing.crash_consumer`` on the checker's subscription, read line by line."""

    def __init__(self, process: asyncio.subprocess.Process) -> None:
        self.process = process
        self.took: set[str] = set()
        self.acked: list[str] = []
        self._reader = asyncio.ensure_future(self._read())

    @classmethod
    async def start(cls, server: ControlledServer, topic: str, subscription: str) -> _ConsumerProcess:
        """Start it and return once its consumer is open (its first line, ``ready``)."""
        config = {
            "url": server.connect,
            "topic": topic,
            "subscription": subscription,
            "options": server.consumer_options,
            "pause": 0.02,  # each message takes a moment: some are in hand when it dies
        }
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "broker.driver.testing.crash_consumer",
            json.dumps(config),
            cwd=_ROOT,
            env={**os.environ, "PYTHONPATH": str(_ROOT)},
            stdout=asyncio.subprocess.PIPE,
        )
        assert process.stdout is not None
        async with asyncio.timeout(60):
            line = await process.stdout.readline()
        if line.strip() != b"ready":
            process.kill()
            await process.wait()
            raise AssertionError(f"the consumer process did not start: {line!r}")
        return cls(process)

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            word, _, value = line.decode().strip().partition(" ")
            if word == "took":
                self.took.add(value)
            elif word == "acked":
                self.acked.append(value)

    async def kill(self, outcome: Outcome) -> frozenset[str]:
        """SIGKILL it; its acked ids become deliveries; return the ids it held unacked."""
        if self.process.returncode is not None:
            raise AssertionError(f"the consumer process ended ({self.process.returncode}) before the crash")
        if not self.acked:
            raise AssertionError("the consumer process acked nothing before it was killed")
        self.process.send_signal(signal.SIGKILL)
        await self.process.wait()
        async with asyncio.timeout(10):
            await self._reader  # what it wrote before it died
        now = time.monotonic()
        outcome.deliveries.extend(Delivery(mid, now) for mid in self.acked)
        return frozenset(self.took - set(self.acked))

    async def close(self) -> None:
        """Kill it if it still runs (the run failed early)."""
        if self.process.returncode is None:
            self.process.kill()
            await self.process.wait()
        self._reader.cancel()
        with contextlib.suppress(BaseException):
            await self._reader
