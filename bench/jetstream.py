"""NATS JetStream: our path and raw nats-py side by side, in one run, against one local nats-server.

Publish: 100,000 messages of 100 bytes, every PubAck awaited.
  raw   ``js.publish_async`` for every message, then all PubAck futures gathered;
  ours  ``topic.batch_publish(*messages)`` (pipelined, a bounded window of PubAcks).
Consume: the same 100,000 messages, fetched in batches and each one acked.
  raw   ``sub.fetch(batch)`` on a pull subscription, ``await msg.ack()`` per message;
  ours  ``backend.batched_messages(...).next_batch()`` + ``broker.ack_all(batch)``
        (and, for information, ``await message.ack()`` per message).

A third side is the fastest competent use of nats-py we know, and the baseline the targets are
judged against: "fast raw", the same technique written directly on nats-py's core protocol calls
(``nc.publish`` with a reply inbox and a window of 1,000; pull requests to
``$JS.API.CONSUMER.MSG.NEXT`` with a callback subscription and ``+ACK`` publishes) - what our path
does, minus everything the library adds. nats-py's high-level JetStream calls above are far slower
than that, so ratios against them flatter us: they are printed for information only.

Each side gets its own stream (file storage) on the same server, started through the backend's
factory. The sides run in a different order each round; each side's best and median are printed
(the machine is shared, so the best round is the least disturbed one). Targets: ours / fast raw
>= 0.90 for publish and >= 0.95 for fetch+ack.

Peer column (``bench/peer_nats.py`` in the peers' virtualenv made by ``bench/peers.py``;
``--no-peers`` skips it): FastStream's JetStream batch pull subscriber, acking each batch after
its handler, on a stream of its own filled before its clock starts.

Usage: python bench/jetstream.py [--messages N] [--batch N] [--rounds N] [--no-peers]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from typing import Any

import nats
from nats.aio.msg import Msg
from nats.js import api
from peers import peer_python, run_peer

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.registration import factory

PAYLOAD = b"x" * 100


async def raw_round(url: str, count: int, batch: int) -> tuple[float, float]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        name = "RAW_" + uuid.uuid4().hex[:8]
        subject = name.lower()
        await js.add_stream(name=name, subjects=[subject])
        payloads = [PAYLOAD] * count

        start = time.perf_counter()
        futures = [await js.publish_async(subject, payload) for payload in payloads]
        acks = await asyncio.gather(*futures)
        publish = time.perf_counter() - start
        assert len(acks) == count and acks[-1].seq == count
        assert (await js.stream_info(name)).state.messages == count

        sub = await js.pull_subscribe(subject, durable="raw", stream=name)
        received = 0
        start = time.perf_counter()
        while received < count:
            msgs = await sub.fetch(batch, timeout=5)
            for msg in msgs:
                await msg.ack()
            received += len(msgs)
        await nc.flush()
        consume = time.perf_counter() - start
        assert received == count
        await js.delete_stream(name)
        return count / publish, count / consume
    finally:
        await nc.close()


async def ours_round(url: str, count: int, batch: int, per_message: bool) -> tuple[float, float, float]:
    backend = broker.connect(url)
    assert isinstance(backend, JetStreamBackend)
    async with backend:
        name = "OURS_" + uuid.uuid4().hex[:8]
        subject = name.lower()
        await backend.provisioner.stream_for(subject)  # the stream exists before the clock starts
        topic = backend.publisher().topic(subject)
        messages = [OutboundMessage(PAYLOAD) for _ in range(count)]

        start = time.perf_counter()
        await topic.batch_publish(*messages)
        publish = time.perf_counter() - start
        jsm = backend.connection.jsm
        assert jsm is not None
        assert (await jsm.stream_info(await backend.provisioner.stream_for(subject))).state.messages == count

        received = 0
        async with backend.batched_messages(subject, "ours", batch_size=batch) as consumer:
            start = time.perf_counter()
            while received < count:
                got = await consumer.next_batch(timeout=5)
                await broker.ack_all(got)
                received += len(got)
            await backend.connection.flush(5)
            consume = time.perf_counter() - start
        assert received == count

        one_by_one = 0.0
        if per_message:
            await backend.provisioner.stream_for(subject)
            async with backend.batched_messages(subject, "ours-each", batch_size=batch) as consumer:
                received = 0
                start = time.perf_counter()
                while received < count:
                    for message in await consumer.next_batch(timeout=5):
                        await message.ack()
                        received += 1
                await backend.connection.flush(5)
                one_by_one = count / (time.perf_counter() - start)
        await jsm.delete_stream(await backend.provisioner.stream_for(subject))
        return count / publish, count / consume, one_by_one


async def core_round(url: str, count: int, batch: int) -> tuple[float, float]:
    nc = await nats.connect(url)
    try:
        js = nc.jetstream()
        name = "CORE_" + uuid.uuid4().hex[:8]
        subject = name.lower()
        await js.add_stream(name=name, subjects=[subject])
        loop = asyncio.get_running_loop()

        # publish: reply inbox per message, a window of 1,000 PubAcks
        inbox = nc.new_inbox() + "."
        cut = len(inbox)
        waiting: dict[str, asyncio.Future[bytes]] = {}

        async def on_ack(msg: Msg) -> None:
            future = waiting.pop(msg.subject[cut:], None)
            if future is not None:
                future.set_result(msg.data)

        await nc.subscribe(inbox + "*", cb=on_ack)
        window: list[asyncio.Future[bytes]] = []
        start = time.perf_counter()
        for i in range(count):
            if len(window) >= 1000:
                for future in window:
                    assert b'"error"' not in await future
                window.clear()
            future = loop.create_future()
            token = str(i)
            waiting[token] = future
            await nc.publish(subject, PAYLOAD, reply=inbox + token)
            window.append(future)
        for future in window:
            assert b'"error"' not in await future
        publish = time.perf_counter() - start
        assert (await js.stream_info(name)).state.messages == count

        # consume: pull requests of `batch`, deliveries collected by a callback, +ACK per message
        await js.add_consumer(name, api.ConsumerConfig(durable_name="core", name="core"))
        got: list[Msg] = []
        wake = asyncio.Event()

        async def on_msg(msg: Msg) -> None:
            if msg.reply:
                got.append(msg)
                wake.set()

        deliver = nc.new_inbox()
        await nc.subscribe(deliver, cb=on_msg)
        request = f'{{"batch": {batch}, "expires": 5000000000}}'.encode()
        received = 0
        start = time.perf_counter()
        while received < count:
            await nc.publish(f"$JS.API.CONSUMER.MSG.NEXT.{name}.core", request, reply=deliver)
            taken = 0
            while taken < batch and received + taken < count:
                await wake.wait()
                wake.clear()
                msgs = got[:]
                got.clear()
                for msg in msgs:
                    await nc.publish(msg.reply, b"+ACK")
                taken += len(msgs)
            received += taken
        await nc.flush()
        consume = time.perf_counter() - start
        await js.delete_stream(name)
        return count / publish, count / consume
    finally:
        await nc.close()


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--messages", type=int, default=100_000)
    parser.add_argument("--batch", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--no-peers", action="store_true", help="skip the FastStream column")
    args = parser.parse_args()
    peers = None if args.no_peers else peer_python()
    peer_con: list[float] = []
    raw_pub: list[float] = []
    raw_con: list[float] = []
    our_pub: list[float] = []
    our_con: list[float] = []
    our_each: list[float] = []
    core_pub: list[float] = []
    core_con: list[float] = []
    with factory.dev_server() as server:
        print(f"nats-server at {server.url}; {args.messages:,} messages of {len(PAYLOAD)} bytes", end="")
        print(f", batch {args.batch}")
        for round_ in range(1, args.rounds + 1):
            results: dict[str, Any] = {}
            order = ["raw", "ours", "core"] + (["faststream"] if peers else [])
            shift = (round_ - 1) % len(order)
            for side in order[shift:] + order[:shift]:  # no side always goes first
                if side == "raw":
                    results[side] = await raw_round(server.url, args.messages, args.batch)
                elif side == "ours":
                    per_message = round_ == 1
                    results[side] = await ours_round(
                        server.url, args.messages, args.batch, per_message=per_message
                    )
                elif side == "core":
                    results[side] = await core_round(server.url, args.messages, args.batch)
                else:
                    assert peers is not None
                    shape = [
                        "--url",
                        server.url,
                        "--messages",
                        str(args.messages),
                        "--batch",
                        str(args.batch),
                    ]
                    peer_con.append(run_peer(peers, "peer_nats.py", "faststream-batch", *shape)["rate"])
            rp, rc = results["raw"]
            op, oc, oe = results["ours"]
            cp, cc = results["core"]
            core_pub.append(cp)
            core_con.append(cc)
            raw_pub.append(rp)
            raw_con.append(rc)
            our_pub.append(op)
            our_con.append(oc)
            if oe:
                our_each.append(oe)
            print(
                f"round {round_}: publish raw {rp:9,.0f}/s ours {op:9,.0f}/s | "
                f"fetch+ack raw {rc:9,.0f}/s ours {oc:9,.0f}/s | core {cp:9,.0f}/s {cc:9,.0f}/s"
                + (f" | faststream fetch+ack {peer_con[-1]:9,.0f}/s" if peer_con else "")
            )

    def cell(rates: list[float]) -> str:
        return f"{max(rates):>10,.0f} ({statistics.median(rates):>8,.0f})"

    print()
    print(
        f"{'msgs/s, best (median)':24}{'fast raw':>21}{'ours':>21}{'ours/fast':>10}"
        f"{'raw nats-py':>21}{'ours/raw':>9}"
    )
    rows = [("publish", core_pub, our_pub, raw_pub), ("fetch+ack", core_con, our_con, raw_con)]
    ratios = []
    for name, fast, ours, slow in rows:
        ratio = max(ours) / max(fast)
        ratios.append(ratio)
        print(
            f"{name:24}{cell(fast):>21}{cell(ours):>21}{ratio:10.2f}{cell(slow):>21}"
            f"{max(ours) / max(slow):9.2f}"
        )
    if our_each:
        print(
            f"{'  ours, ack per message':24}{'':21}{cell(our_each):>21}{max(our_each) / max(core_con):10.2f}"
        )
    if peer_con:
        print(
            f"{'  FastStream batch (peer)':24}{'':21}{cell(peer_con):>21}"
            f"{'':10}ours/FastStream {max(our_con) / max(peer_con):.2f}"
        )
    print(
        "median ratios ours/fast raw: "
        f"publish {statistics.median(our_pub) / statistics.median(core_pub):.2f}, "
        f"fetch+ack {statistics.median(our_con) / statistics.median(core_con):.2f}"
    )
    ok = ratios[0] >= 0.9 and ratios[1] >= 0.95
    print("targets (ours / fast raw: publish >= 0.90, fetch+ack >= 0.95):", "met" if ok else "NOT met")


if __name__ == "__main__":
    asyncio.run(main())
