"""Retries, dead letters and graceful shutdown on the in-memory broker.

    python examples/retries.py

A payment service: a flaky downstream fails some payments a couple of times (retried with
jittered backoff), a malformed payment can never succeed (non-retryable: straight to the
dead-letter topic, with attributes saying why). The service runs under ``broker.run``, which would
stop it on SIGTERM; here it stops itself once every payment is settled. The same code runs on
any backend: change the URL.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections import Counter

import broker
from broker.message import Message, OutboundMessage

URL = sys.argv[1] if len(sys.argv) > 1 else "inmem://retries-example"


class Malformed(Exception):
    """A payment that can never be processed."""


async def main() -> int:
    """Run the payment service until every payment is settled; its exit code."""
    backend = broker.connect(URL)
    attempts: Counter[int] = Counter()
    paid: list[int] = []
    done = asyncio.Event()

    async def pay(message: Message) -> None:
        payment = json.loads(message.data)
        if "amount" not in payment:
            raise Malformed(f"payment {payment['id']} has no amount")
        attempts[payment["id"]] += 1
        if payment["id"] % 3 == 0 and attempts[payment["id"]] < 3:  # the downstream is flaky
            raise ConnectionError("payment gateway timed out")
        paid.append(payment["id"])
        await message.ack()
        if len(paid) == 9:
            done.set()

    policy = broker.RetryPolicy(
        max_attempts=5,
        backoff=broker.Backoff(initial=0.05, multiplier=2, maximum=1.0, jitter="equal"),
        dead_letter=broker.DeadLetterTopic("payments-dlq"),
        non_retryable=(Malformed,),
    )
    async with backend.messages("payments-dlq", "ops") as dead_letters:
        payments = backend.receiver("payments", "billing", concurrency=4, retry=policy, drain_timeout=5)
        await (
            backend.publisher()
            .topic("payments")
            .batch_publish(
                *(OutboundMessage(json.dumps({"id": i, "amount": 10 * i}).encode()) for i in range(9)),
                OutboundMessage(json.dumps({"id": 99}).encode()),  # malformed
            )
        )
        stop = asyncio.Event()

        async def stop_when_done() -> None:
            await done.wait()
            letter = await dead_letters.next_message(timeout=10)
            await letter.ack()
            print(f"dead-lettered {letter.data.decode()}: {letter.attributes['x-dead-letter-reason']}")
            print(f"  error: {letter.attributes['x-dead-letter-error']}")
            stop.set()  # what SIGTERM does in production

        watcher = asyncio.ensure_future(stop_when_done())
        code = await broker.run((payments, pay), drain_timeout=5, stop=stop)
        await watcher
    await backend.close()
    retried = sorted(i for i, n in attempts.items() if n > 1)
    print(f"paid {len(paid)} payments: {sorted(paid)}; retried after a failure: {retried}")
    print(f"exit code {code}")
    return code


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
