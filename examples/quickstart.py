"""Quick start: publish, consume with a receiver, retry a failure, read the log back.

Runs on the in-memory broker by default; pass another URL to run the same code elsewhere:

    python examples/quickstart.py                       # inmem://quickstart
    python examples/quickstart.py nats://127.0.0.1:4222  # after `broker dev nats`
"""

from __future__ import annotations

import asyncio
import json
import sys

import broker
from broker import Message, OutboundMessage, adapt


async def main(url: str) -> None:
    """Publish ten payments and handle them with four concurrent handlers."""
    async with broker.connect(url) as backend:
        topic = backend.publisher().topic("payments")
        handled: list[int] = []
        done = asyncio.Event()

        async def handle(message: Message) -> None:
            payment = json.loads(message.data)
            if payment["amount"] < 0 and message.delivery_attempt == 1:
                raise ValueError("negative amount")  # the receiver nacks it; it comes back
            handled.append(payment["id"])
            await message.ack()
            if len(handled) == 10:
                done.set()

        receiver = adapt.receiver(backend.messages("payments", "ledger"), concurrency=4)
        task = asyncio.create_task(receiver.receive(handle))
        await topic.batch_publish(
            *(
                OutboundMessage(
                    json.dumps({"id": i, "amount": -5 if i == 3 else 10 * i}).encode(), key=f"acct-{i % 3}"
                )
                for i in range(10)
            )
        )
        await asyncio.wait_for(done.wait(), 30)
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        print(f"handled {len(handled)} payments: {sorted(handled)}")


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1] if len(sys.argv) > 1 else "inmem://quickstart"))
