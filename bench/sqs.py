"""Amazon SQS: our path and raw aiobotocore doing the same calls, in one run, on one local moto server.

No real SQS runs here: the server is moto's (``moto[server]``), a FAKE of SQS that answers from
memory. Each call costs the fake far more than either client spends on it, so the rates mostly
measure the fake; the client's own cost is the CPU time this process spends per message (the
fake runs in a process of its own), printed beside the rates. The fake's cost per call grows with
the length of the queue (it scans and copies its messages on every receive), so a round's
messages go in cycles of at most 100 (publish them, then receive + delete them), the phases'
times summed over the cycles: more messages a round cost time linearly, not quadratically.

Publish: N messages of 100 bytes to a queue (queue mode), in batches of ten, every batch answered.
  raw   ``SendMessageBatch`` of ten entries, awaited;
  ours  ``topic.batch_publish(*batch)`` (one ``SendMessageBatch`` per ten).
Receive + delete: the same N messages, ten per receive, each batch deleted.
  raw   ``ReceiveMessage`` (ten, long polling, the same attribute names ours asks for) then
        ``DeleteMessageBatch`` of what came;
  ours  ``backend.batched_messages(..., batch_size=10).next_batch()`` + ``broker.ack_all(batch)``
        (one ``DeleteMessageBatch``).

The same work: both sides use one aiobotocore SQS client each, made before the clock starts, on a
queue of their own made alike (the same server, started through the backend's factory; the 1 MiB
``MaximumMessageSize`` the backend gives its queues), after a warm-up of each side that is not
counted. The raw client gets the retry configuration the backend's clients
have, botocore's ``standard`` mode with three attempts (AWS's recommended mode; botocore's default
is ``legacy``): its per-request bookkeeping is the SDK's, not the backend's, and a raw user who
configures retries pays it too. Over the fake's plain http the backend registers no handler of
its own on the requests (its certificate check is for https endpoints).

How the CPU time is measured: ``time.process_time()`` (this process, every thread) around each
phase of each side. Before each phase the garbage collector runs and freezes what exists
(``gc.collect()``, ``gc.freeze()``), outside the clock, so neither side pays for collecting
what was made before its clock (its client, the other side's leftovers) and a full collection
scans only the phase's own objects; collection stays on during the phase, so each side pays for
its own garbage. A round opens both sides together and interleaves their cycles (which side goes
first alternates from cycle to cycle), so the two sides of a round meet the same load on the
shared machine; the CPU figure is the median, over every cycle of every round, of the ratio of our
CPU time to raw's in that cycle (the two ran one after the other, with the same messages: the
closest pair in time this bench has; this machine's speed drifts by up to 1.5x over seconds), and
each side's median CPU per message over the rounds is printed beside it.
Rates: each side's best and median (the best round is the least disturbed one) over ``--rounds``
rounds (default 11: a best of a few rounds is often one side's lucky round, not the other's). Targets: ours /
raw >= 0.95, best and median, for publish and for receive + delete; and our CPU time per message
<= 1.05 x raw's (the median of the cycles' paired ratios).

Run it under the team's benchmark lock, with the project's virtualenv:

    flock /work/notes/bench.lock .venv/bin/python bench/sqs.py [--messages N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import statistics
import time
import uuid
from collections.abc import Iterator
from typing import Any

from aiobotocore.config import AioConfig
from aiobotocore.session import get_session

import broker
from broker import OutboundMessage
from broker.backends.sqs.backend import SqsBackend
from broker.backends.sqs.devserver import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY
from broker.backends.sqs.registration import factory
from broker.backends.sqs.settings import MAX_SQS_BYTES
from broker.connect import available_backends, register_backend

PAYLOAD = b"x" * 100
#: Messages one ``SendMessageBatch`` / ``ReceiveMessage`` / ``DeleteMessageBatch`` takes.
BATCH = 10
#: The most messages a cycle publishes before receiving them (the fake's queue stays this short).
CYCLE = 100
#: The attribute names our receive asks for; the raw side asks for the same.
SYSTEM_ATTRIBUTES: Any = ["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"]
#: The retry configuration of the backend's clients (``SqsConnection.clients``), the raw one's too.
RETRIES: Any = {"mode": "standard", "max_attempts": 3}

#: (messages per second, CPU seconds per message) of one phase.
Phase = tuple[float, float]


class Clock:
    """The wall and CPU seconds of one phase of one side, summed over a round's cycles."""

    def __init__(self) -> None:
        self.wall = 0.0
        self.cpu = 0.0
        #: The CPU seconds of each cycle, in order (the other side ran the same cycle beside it).
        self.cycle_cpu: list[float] = []

    @contextlib.contextmanager
    def timing(self) -> Iterator[None]:
        """Time the block; collect and freeze the garbage made before it first, off the clock."""
        gc.collect()
        gc.freeze()
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            yield
        finally:
            used = time.process_time() - cpu
            self.cpu += used
            self.cycle_cpu.append(used)
            self.wall += time.perf_counter() - wall
            gc.unfreeze()

    def phase(self, count: int) -> Phase:
        """Messages per second and CPU seconds per message over ``count`` messages."""
        return count / self.wall, self.cpu / count


def cycles(count: int) -> Iterator[int]:
    """The number of messages of each cycle of a round of ``count``."""
    for first in range(0, count, CYCLE):
        yield min(CYCLE, count - first)


class RawSide:
    """Raw aiobotocore: one SQS client and a queue of its own, made before any clock starts."""

    def __init__(self, endpoint: str) -> None:
        self.endpoint = endpoint
        self.stack = contextlib.AsyncExitStack()
        self.sqs: Any = None
        self.url = ""
        self.body = PAYLOAD.decode()

    async def __aenter__(self) -> RawSide:
        self.sqs = await self.stack.enter_async_context(
            get_session().create_client(
                "sqs",
                region_name="us-east-1",
                endpoint_url=self.endpoint,
                aws_access_key_id=FAKE_ACCESS_KEY_ID,
                aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
                config=AioConfig(retries=RETRIES),
            )
        )
        name = "raw-" + uuid.uuid4().hex[:8]
        # made as the backend makes its queues (the largest message size SQS allows)
        attributes: Any = {"MaximumMessageSize": str(MAX_SQS_BYTES)}
        self.url = (await self.sqs.create_queue(QueueName=name, Attributes=attributes))["QueueUrl"]
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sqs.delete_queue(QueueUrl=self.url)
        await self.stack.aclose()

    async def cycle(self, size: int, publish: Clock, consume: Clock) -> None:
        """Publish ``size`` messages in batches of ten, then receive and delete them."""
        sqs, url = self.sqs, self.url
        with publish.timing():
            for first in range(0, size, BATCH):
                entries: Any = [
                    {"Id": str(i), "MessageBody": self.body, "MessageAttributes": {}}
                    for i in range(min(BATCH, size - first))
                ]
                answer = await sqs.send_message_batch(QueueUrl=url, Entries=entries)
                assert not answer.get("Failed")
        received = 0
        with consume.timing():
            while received < size:
                got = await sqs.receive_message(
                    QueueUrl=url,
                    MaxNumberOfMessages=BATCH,
                    WaitTimeSeconds=1,
                    VisibilityTimeout=30,
                    MessageAttributeNames=["All"],
                    MessageSystemAttributeNames=SYSTEM_ATTRIBUTES,
                )
                messages = got.get("Messages", [])
                if messages:
                    await sqs.delete_message_batch(
                        QueueUrl=url,
                        Entries=[
                            {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]}
                            for i, m in enumerate(messages)
                        ],
                    )
                received += len(messages)


class OurSide:
    """The backend (queue mode): its clients, a topic and a batched consumer, made before any clock."""

    def __init__(self, url: str) -> None:
        backend = broker.connect(f"{url}&mode=queue&wait_time=1")
        assert isinstance(backend, SqsBackend)
        self.backend = backend
        self.name = "ours-" + uuid.uuid4().hex[:8]
        self.stack = contextlib.AsyncExitStack()
        self.messages = [OutboundMessage(PAYLOAD) for _ in range(CYCLE)]
        self.consumer: Any = None

    async def __aenter__(self) -> OurSide:
        await self.stack.enter_async_context(self.backend)
        self.topic = self.backend.publisher().topic(self.name)
        await self.backend.connection.target(self.name)  # the queue made and its limit read
        # a consumer receives only when asked: open across the cycles, it reads nothing early
        consumer = self.backend.batched_messages(self.name, "s", batch_size=BATCH)
        self.consumer = await self.stack.enter_async_context(consumer)
        return self

    async def __aexit__(self, *exc: object) -> None:
        _, sqs = await self.backend.connection.clients()
        await sqs.delete_queue(QueueUrl=self.backend.connection.queues[self.name])
        await self.stack.aclose()

    async def cycle(self, size: int, publish: Clock, consume: Clock) -> None:
        """Publish ``size`` messages in batches of ten, then receive and delete them."""
        topic, consumer, messages = self.topic, self.consumer, self.messages
        with publish.timing():
            for first in range(0, size, BATCH):
                await topic.batch_publish(*messages[first : min(first + BATCH, size)])
        received = 0
        with consume.timing():
            while received < size:
                got = await consumer.next_batch(timeout=10)
                await broker.ack_all(got)
                received += len(got)


async def run_round(
    endpoint: str, url: str, count: int, round_: int, paired: list[list[float]] | None = None
) -> dict[str, tuple[Phase, Phase]]:
    """One round: both sides open at once, their cycles interleaved (alternating which goes first),
    so the two sides of a round meet the same load; each side's two phases over ``count`` messages.
    ``paired`` gets, per phase, each cycle's ratio of our CPU time to raw's."""
    async with RawSide(endpoint) as raw, OurSide(url) as ours:
        sides: dict[str, RawSide | OurSide] = {"raw": raw, "ours": ours}
        clocks = {name: (Clock(), Clock()) for name in sides}
        for number, size in enumerate(cycles(count)):
            order = ("raw", "ours") if (round_ + number) % 2 else ("ours", "raw")  # no side always first
            for name in order:
                await sides[name].cycle(size, *clocks[name])
        if paired is not None:
            for i in range(2):
                ratios = zip(clocks["ours"][i].cycle_cpu, clocks["raw"][i].cycle_cpu, strict=True)
                paired[i].extend(o / r for o, r in ratios)
        return {
            name: (publish.phase(count), consume.phase(count)) for name, (publish, consume) in clocks.items()
        }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=300, help="messages a round, each side")
    parser.add_argument("--rounds", type=int, default=11)
    args = parser.parse_args()
    if "sqs" not in available_backends():  # an environment installed before the entry point existed
        register_backend("sqs", factory)
    names = ("publish (batches of 10)", "receive + delete")
    raw: list[list[Phase]] = [[], []]
    ours: list[list[Phase]] = [[], []]
    paired: list[list[float]] = [[], []]  # per phase: ours / raw CPU time of each cycle
    with factory.dev_server() as server:
        endpoint = f"http://{server.host}:{server.port}"
        print(
            f"moto server (a FAKE of SQS) at {endpoint}; {args.messages:,} messages of {len(PAYLOAD)} bytes"
            f" a round, in cycles of at most {CYCLE}; CPU: process_time, garbage collected off the clock"
        )
        # a warm-up of each side, not counted: botocore loads its service models on the first client
        await run_round(endpoint, server.url, 2 * BATCH, 0)
        for round_ in range(1, args.rounds + 1):
            results = await run_round(endpoint, server.url, args.messages, round_, paired)
            for i in range(2):
                raw[i].append(results["raw"][i])
                ours[i].append(results["ours"][i])
            print(
                f"round {round_}: "
                + " | ".join(
                    f"{name} raw {results['raw'][i][0]:7,.0f}/s {results['raw'][i][1] * 1e6:5.0f} us cpu"
                    f" ours {results['ours'][i][0]:7,.0f}/s {results['ours'][i][1] * 1e6:5.0f} us cpu"
                    f" ({results['ours'][i][1] / results['raw'][i][1]:.2f})"
                    for i, name in enumerate(names)
                )
            )

    def cell(rates: list[float]) -> str:
        return f"{max(rates):>8,.0f} ({statistics.median(rates):>7,.0f})"

    print()
    header = f"{'msgs/s, best (median)':26}{'raw aiobotocore':>18}{'ours':>18}{'best':>7}{'median':>8}"
    print(f"{header}{'cpu us/msg raw':>16}{'ours':>7}{'ratio':>7}")
    met = True
    for i, name in enumerate(names):
        raw_rates, our_rates = [r for r, _ in raw[i]], [r for r, _ in ours[i]]
        raw_cpu, our_cpu = statistics.median(c for _, c in raw[i]), statistics.median(c for _, c in ours[i])
        best = max(our_rates) / max(raw_rates)
        median = statistics.median(our_rates) / statistics.median(raw_rates)
        cpu = statistics.median(paired[i])
        met = met and best >= 0.95 and median >= 0.95 and cpu <= 1.05
        print(
            f"{name:26}{cell(raw_rates):>18}{cell(our_rates):>18}{best:7.2f}{median:8.2f}"
            f"{raw_cpu * 1e6:16.0f}{our_cpu * 1e6:7.0f}{cpu:7.2f}"
        )
    print(
        "targets (ours / raw >= 0.95 best and median; cpu per message <= 1.05 x raw, median of the"
        f" cycles' paired ratios, {len(paired[0])} cycles):",
        "met" if met else "NOT met",
    )


if __name__ == "__main__":
    asyncio.run(main())
