"""Amazon SQS: our path and raw aiobotocore doing the same calls, in one run, on one local moto server.

No real SQS runs here: the server is moto's (``moto[server]``), a FAKE of SQS that answers from
memory. Each call costs the fake far more than either client spends on it, so the rates mostly
measure the fake; the client's own cost is the CPU time this process spends per message (the
fake runs in a process of its own), printed beside the rates. The default run is small (200
messages a round): the fake's cost per call grows with the length of the queue (it scans and
copies its messages on every receive), and on a shared machine 1,000 messages take minutes a round.

Publish: N messages of 100 bytes to a queue (queue mode), in batches of ten, every batch answered.
  raw   ``SendMessageBatch`` of ten entries, awaited;
  ours  ``topic.batch_publish(*batch)`` (one ``SendMessageBatch`` per ten).
Receive + delete: the same N messages, ten per receive, each batch deleted.
  raw   ``ReceiveMessage`` (ten, long polling, the same attribute names ours asks for) then
        ``DeleteMessageBatch`` of what came;
  ours  ``backend.batched_messages(..., batch_size=10).next_batch()`` + ``broker.ack_all(batch)``
        (one ``DeleteMessageBatch``).

Both sides use one aiobotocore SQS client each, made before the clock starts, on a queue of their
own (the same server, started through the backend's factory), after a warm-up of each side that
is not counted. The sides run in alternating order each round; each side's best and median are
printed (the machine is shared, so the best round is the least disturbed one). Targets: ours /
raw >= 0.95, best and median, for publish and for receive + delete; and our CPU time per message
<= 1.05 x raw's (medians).

Run it under the team's benchmark lock, with the project's virtualenv:

    flock /work/notes/bench.lock .venv/bin/python bench/sqs.py [--messages N] [--rounds N]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

from aiobotocore.session import get_session

import broker
from broker import OutboundMessage
from broker.backends.sqs.backend import SqsBackend
from broker.backends.sqs.devserver import FAKE_ACCESS_KEY_ID, FAKE_SECRET_ACCESS_KEY
from broker.backends.sqs.registration import factory
from broker.connect import available_backends, register_backend

PAYLOAD = b"x" * 100
#: Messages one ``SendMessageBatch`` / ``ReceiveMessage`` / ``DeleteMessageBatch`` takes.
BATCH = 10
#: The attribute names our receive asks for; the raw side asks for the same.
SYSTEM_ATTRIBUTES: Any = ["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"]

#: (messages per second, CPU seconds per message) of one phase.
Phase = tuple[float, float]


def _timed(start: float, cpu: float, count: int) -> Phase:
    return count / (time.perf_counter() - start), (time.process_time() - cpu) / count


async def raw_round(endpoint: str, count: int) -> tuple[Phase, Phase]:
    """Publish and receive + delete with a raw aiobotocore SQS client."""
    async with get_session().create_client(
        "sqs",
        region_name="us-east-1",
        endpoint_url=endpoint,
        aws_access_key_id=FAKE_ACCESS_KEY_ID,
        aws_secret_access_key=FAKE_SECRET_ACCESS_KEY,
    ) as sqs:
        name = "raw-" + uuid.uuid4().hex[:8]
        url = (await sqs.create_queue(QueueName=name))["QueueUrl"]
        body = PAYLOAD.decode()
        start, cpu = time.perf_counter(), time.process_time()
        for first in range(0, count, BATCH):
            entries: Any = [
                {"Id": str(i), "MessageBody": body, "MessageAttributes": {}}
                for i in range(min(BATCH, count - first))
            ]
            answer = await sqs.send_message_batch(QueueUrl=url, Entries=entries)
            assert not answer.get("Failed")
        publish = _timed(start, cpu, count)

        received = 0
        start, cpu = time.perf_counter(), time.process_time()
        while received < count:
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
                        {"Id": str(i), "ReceiptHandle": m["ReceiptHandle"]} for i, m in enumerate(messages)
                    ],
                )
            received += len(messages)
        consume = _timed(start, cpu, count)
        await sqs.delete_queue(QueueUrl=url)
        return publish, consume


async def ours_round(url: str, count: int) -> tuple[Phase, Phase]:
    """The same two phases through the backend (queue mode)."""
    backend = broker.connect(f"{url}&mode=queue&wait_time=1")
    assert isinstance(backend, SqsBackend)
    async with backend:
        name = "ours-" + uuid.uuid4().hex[:8]
        topic = backend.publisher().topic(name)
        await backend.connection.target(name)  # the queue made and its limit read before the clock
        messages = [OutboundMessage(PAYLOAD) for _ in range(count)]
        start, cpu = time.perf_counter(), time.process_time()
        for first in range(0, count, BATCH):
            await topic.batch_publish(*messages[first : first + BATCH])
        publish = _timed(start, cpu, count)

        received = 0
        async with backend.batched_messages(name, "s", batch_size=BATCH) as consumer:
            start, cpu = time.perf_counter(), time.process_time()
            while received < count:
                got = await consumer.next_batch(timeout=10)
                await broker.ack_all(got)
                received += len(got)
            consume = _timed(start, cpu, count)
        _, sqs = await backend.connection.clients()
        await sqs.delete_queue(QueueUrl=backend.connection.queues[name])
        return publish, consume


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    if "sqs" not in available_backends():  # an environment installed before the entry point existed
        register_backend("sqs", factory)
    names = ("publish (batches of 10)", "receive + delete")
    raw: list[list[Phase]] = [[], []]
    ours: list[list[Phase]] = [[], []]
    with factory.dev_server() as server:
        endpoint = f"http://{server.host}:{server.port}"
        print(
            f"moto server (a FAKE of SQS) at {endpoint}; {args.messages:,} messages of {len(PAYLOAD)} bytes"
        )
        # a warm-up of each side, not counted: botocore loads its service models on the first client
        await raw_round(endpoint, 2 * BATCH)
        await ours_round(server.url, 2 * BATCH)
        for round_ in range(1, args.rounds + 1):
            order = ["raw", "ours"] if round_ % 2 else ["ours", "raw"]  # no side always goes first
            results: dict[str, tuple[Phase, Phase]] = {}
            for side in order:
                if side == "raw":
                    results[side] = await raw_round(endpoint, args.messages)
                else:
                    results[side] = await ours_round(server.url, args.messages)
            for i in range(2):
                raw[i].append(results["raw"][i])
                ours[i].append(results["ours"][i])
            print(
                f"round {round_}: "
                + " | ".join(
                    f"{name} raw {results['raw'][i][0]:7,.0f}/s {results['raw'][i][1] * 1e6:5.0f} us cpu"
                    f" ours {results['ours'][i][0]:7,.0f}/s {results['ours'][i][1] * 1e6:5.0f} us cpu"
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
        cpu = our_cpu / raw_cpu
        met = met and best >= 0.95 and median >= 0.95 and cpu <= 1.05
        print(
            f"{name:26}{cell(raw_rates):>18}{cell(our_rates):>18}{best:7.2f}{median:8.2f}"
            f"{raw_cpu * 1e6:16.0f}{our_cpu * 1e6:7.0f}{cpu:7.2f}"
        )
    print(
        "targets (ours / raw >= 0.95 best and median; cpu per message <= 1.05 x raw):",
        "met" if met else "NOT met",
    )


if __name__ == "__main__":
    asyncio.run(main())
