"""A Pulsar consumer process SIGKILLed mid-flight: nothing is lost, and only its in-flight work repeats.

The consumer runs in a subprocess (``broker.driver.testing.crash_consumer``) and reports each message it
took and acked; it is killed with SIGKILL after about a quarter of the messages were acked. A new
consumer then takes over. Pulsar redelivers whatever it had dispatched to the dead consumer,
including messages only prefetched into its receive queue, and counts every one of them as a
redelivery: the prefetch bound (``receiver_queue_size``, 100 by default) bounds how many messages
show ``delivery_attempt > 1`` without a handler having seen them.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections import Counter
from collections.abc import Callable

import pytest

from broker import OutboundMessage
from broker.backends.pulsar.backend import PulsarBackend
from broker.message import Message
from tests.integration.pulsar.server import PulsarTestServer

Name = Callable[..., str]

#: Seconds of acks that may still have been on their way to the broker when the process was
#: killed: the Pulsar client sends acks grouped, every 100 ms (``ackGroupingTimeMs``, which the
#: Python client does not expose), so ``ack()`` returns before the broker has the ack.
ACKS_IN_FLIGHT = 0.3


@pytest.mark.slow
@pytest.mark.parametrize("options", [{}, {"ack_deadline": 10}], ids=["no-deadline", "ack-deadline"])
async def test_sigkilled_consumer_loses_nothing_and_repeats_only_in_flight_work(
    pulsar: PulsarTestServer, backend: PulsarBackend, name: Name, options: dict[str, object]
) -> None:
    topic, sub = name("crash"), name("sub")
    count = 2000
    queue_size = backend.settings.receiver_queue_size
    await backend.create_subscription(topic, sub)
    await (
        backend.publisher()
        .topic(topic)
        .batch_publish(*(OutboundMessage(str(i).encode()) for i in range(count)))
    )
    config = {"url": pulsar.url, "topic": topic, "subscription": sub, "options": options, "pause": 0.005}
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "broker.driver.testing.crash_consumer",
        json.dumps(config),
        stdout=asyncio.subprocess.PIPE,
    )
    assert process.stdout is not None
    took: set[int] = set()
    acked: list[int] = []
    acked_at: dict[int, float] = {}

    def read(line: bytes) -> None:
        word, _, value = line.decode().strip().partition(" ")
        if word == "took":
            took.add(int(value))
        elif word == "acked":
            acked.append(int(value))
            acked_at[int(value)] = time.monotonic()

    try:
        async with asyncio.timeout(60):
            while len(acked) < count // 4:
                line = await process.stdout.readline()
                if not line:
                    pytest.fail("the consumer process ended before it was killed")
                read(line)
    finally:
        if process.returncode is None:
            process.kill()  # SIGKILL: no close, no nack, no flush
        await process.wait()
    killed = time.monotonic()
    for line in (await process.stdout.read()).splitlines():
        read(line)
    rest: list[Message] = []
    async with backend.messages(topic, sub, **options) as consumer:  # type: ignore[arg-type]
        async with asyncio.timeout(60):
            while set(acked) | {int(m.data) for m in rest} != set(range(count)):
                message = await consumer.next_message()
                await message.ack()
                rest.append(message)
        recovered = time.monotonic() - killed
        while True:
            try:
                extra = await consumer.next_message(timeout=1.0)
            except TimeoutError:
                break
            await extra.ack()
            rest.append(extra)
    values = Counter(int(m.data) for m in rest)
    assert not set(range(count)) - set(acked) - set(values), "lost"
    assert max(values.values()) == 1, "delivered twice to the new consumer"
    in_flight = {v for v, at in acked_at.items() if at >= killed - ACKS_IN_FLIGHT}
    again = (set(acked) - in_flight) & set(values)
    assert not again, f"acked well before the kill, delivered again: {sorted(again)}"
    repeated = {int(m.data) for m in rest if (m.delivery_attempt or 1) > 1}
    taken_not_acked = took - set(acked)
    never_handed_out = repeated - took
    # Counted as redelivered without a handler having seen them: at most the prefetch bound.
    bound = queue_size if options else 2 * queue_size
    assert len(never_handed_out) <= bound, (
        f"{len(never_handed_out)} messages never handed out count as redelivered (bound {bound})"
    )
    assert taken_not_acked <= set(values)
    print(
        f"acked before the kill {len(acked)}, taken not acked {len(taken_not_acked)}, "
        f"redelivered {len(repeated)} ({len(never_handed_out)} never handed out), recovery {recovered:.1f}s"
    )
    assert recovered < 30
