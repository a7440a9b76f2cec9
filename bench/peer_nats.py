"""A peer side of ``bench/jetstream.py``: FastStream's NATS JetStream pull subscriber.

Runs in the peers' virtualenv (``bench/peers.py``), never in the project's. It makes its own
stream, fills it with nats-py before the clock starts, then consumes it with FastStream's batch
pull subscriber (``PullSub(batch=True)``, each batch acked after the handler returns:
``AckPolicy.ACK``). The clock runs from the first message handed to the handler to the last.
Prints one JSON line: ``{"rate": msgs_per_second}``.

Usage (by bench/jetstream.py): peer_nats.py faststream-batch --url nats://... --messages N --batch N
"""

from __future__ import annotations

import argparse
import asyncio
import json
import time
import uuid
from typing import Any

PAYLOAD = b"x" * 100


async def fill(url: str, stream: str, subject: str, count: int) -> None:
    import nats  # type: ignore[import-not-found, unused-ignore]

    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        await js.add_stream(name=stream, subjects=[subject])
        window = 1000
        for start in range(0, count, window):
            futures = [await js.publish_async(subject, PAYLOAD) for _ in range(min(window, count - start))]
            await asyncio.gather(*futures)
    finally:
        await nc.close()


async def faststream_batch(args: argparse.Namespace) -> dict[str, Any]:
    from faststream import AckPolicy  # type: ignore[import-not-found, unused-ignore]
    from faststream.nats import JStream, NatsBroker, PullSub  # type: ignore[import-not-found, unused-ignore]

    stream = "PEER_" + uuid.uuid4().hex[:8]
    subject = stream.lower()
    await fill(args.url, stream, subject, args.messages)
    app = NatsBroker(args.url, logger=None)
    done = asyncio.Event()
    marks: dict[str, float] = {}
    seen = [0]

    @app.subscriber(
        subject,
        stream=JStream(stream, declare=False),
        durable="faststream",
        pull_sub=PullSub(batch_size=args.batch, batch=True, timeout=1.0),
        ack_policy=AckPolicy.ACK,
    )
    async def handle(bodies: list[bytes]) -> None:
        if not seen[0]:
            marks["first"] = time.perf_counter()
        seen[0] += len(bodies)
        if seen[0] >= args.messages:
            marks["last"] = time.perf_counter()
            done.set()

    async with app:
        await app.start()
        await asyncio.wait_for(done.wait(), timeout=600)
        await asyncio.sleep(0.2)  # the last batch's acks go out after the handler returns
    return {"rate": args.messages / (marks["last"] - marks["first"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("side", choices=["faststream-batch"])
    parser.add_argument("--url", required=True)
    parser.add_argument("--messages", type=int, required=True)
    parser.add_argument("--batch", type=int, default=500)
    args = parser.parse_args()
    print(json.dumps(asyncio.run(faststream_batch(args))))


if __name__ == "__main__":
    main()
