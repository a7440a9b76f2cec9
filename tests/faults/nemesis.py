"""The faults ("nemeses") and one fault run: workload, fault in the middle, checker verdict.

* ``pause``: SIGSTOP the server's whole process group for longer than the client's heartbeat,
  session and ack-deadline timeouts, then SIGCONT;
* ``restart``: SIGKILL the process group, then start the server again on the same port and storage.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import broker
from tests.faults.servers import ControlledServer
from tests.faults.workload import Outcome, Report, check, consume, publish_at_rate, read_confirmed

__all__ = ["FAULTS", "PAUSE_SECONDS", "RunResult", "run_fault"]

FAULTS = ("pause", "restart")

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
    "pubsub": 12.0,  # ack_deadline 10 s (Pub/Sub's floor)
    "servicebus": 8.0,
}


@dataclass(frozen=True)
class RunResult:
    """One cell of the fault table."""

    backend: str
    fault: str
    report: Report
    fault_seconds: float
    wall_seconds: float


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
        publisher = asyncio.ensure_future(
            publish_at_rate(backend, topic, run, count, rate, confirmed_file, outcome)
        )
        await asyncio.sleep(fault_after)
        fault_start = time.monotonic()
        if fault == "pause":
            server.pause()
            try:
                await asyncio.sleep(PAUSE_SECONDS[server.backend])
            finally:
                server.resume()
        elif fault == "restart":
            before = server.pids()
            await asyncio.to_thread(server.restart)
            if not server.pids() or set(server.pids()) & set(before):
                raise AssertionError(f"the restart left processes {before} -> {server.pids()}")
        else:
            raise ValueError(f"unknown fault {fault!r}; one of {FAULTS}")
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
    return RunResult(server.backend, fault, report, fault_end - fault_start, time.monotonic() - started)
