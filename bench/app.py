"""broker.App against the hand-written receiver loop it replaces, and against FastStream.

A subscriber taking a pydantic model (4 fields, ~60 bytes of JSON), acked on return:

app:         ``@app.subscriber(topic, sub)`` on ``async def handle(order: Order) -> None``, run by
             ``app.lifespan()`` (decode by annotation, auto-ack, lease keeping where the backend has
             ``in_progress``).
hand:        ``backend.receiver(topic, sub)`` with a handler that decodes ``message.data`` with the
             same binding's decoder and awaits ``message.ack()``: the loop a service wrote by hand.
faststream:  FastStream's subscriber with the same model and ``AckPolicy.ACK`` (Kafka, NATS
             JetStream), run by the peers' Python (``bench/peers.py``, ``bench/peer_app.py``).

Each side's topic is filled before its clock starts; the clock runs from the first message handed
to the handler to the last, so a consumer group's join is not timed. Beside the wall-clock rates,
each round's rates by this process's CPU time over the same window are printed (every thread of
the client; the servers run in processes of their own): on a shared machine a round's wall time
also holds whatever else ran, its CPU time only the side's own work. One handler at a time on every
side. Sides alternate (the order rotates each round).

Each round of the app and hand sides runs in a Python process of its own, started for it (as
pyperf runs its worker processes; the start-up and imports are outside the clock): the same code
runs at about 65k or at about 100k messages a second here depending on the process (its memory
layout and hash seed), and a layout that suits one side's code need not suit the other's: in one
shared process for a whole run, that luck favoured one side throughout (medians of one run from
0.89 to 1.20 for the same code). With a process a round, it is drawn again each round for each
side. ``--rounds`` in-memory rounds (default 12) and
``--server-rounds`` Kafka and NATS rounds (default 7; a group join each).

Targets: app / hand >= 0.95 best and median (in memory and Kafka); app / FastStream >= 3 (Kafka
and NATS). Kafka runs on a local Tansu and NATS on a local nats-server, started for the run.

Usage: python bench/app.py [--messages N] [--server-messages N] [--rounds N] [--server-rounds N]
       [--no-kafka] [--no-nats] [--no-peers]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import statistics
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pydantic

import broker
from broker import Message, OutboundMessage, typed
from broker.app import App


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int
    price: float


BINDING = typed.binding(Order)


def bodies(count: int) -> list[OutboundMessage]:
    attrs = {"content-type": BINDING.content_type}
    return [
        OutboundMessage(BINDING.encoder(Order(id=i, item="book", qty=i % 7, price=9.5)), None, attrs)
        for i in range(count)
    ]


async def fill(url: str, count: int) -> tuple[str, str]:
    """A new topic with a subscription holding ``count`` orders."""
    topic, sub = f"app-bench-{uuid.uuid4().hex[:8]}", "bench"
    async with broker.connect(url) as backend:
        async with backend.messages(topic, sub):
            pass  # the subscription exists before the messages are published
        items = bodies(count)
        handle = backend.publisher().topic(topic)
        for start in range(0, count, 1000):
            await handle.batch_publish(*items[start : start + 1000])
    return topic, sub


class Clock:
    """First and last handled message; done once ``count`` were handled."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.seen = 0
        self.first = 0.0
        self.last = 0.0
        self.first_cpu = 0.0
        self.last_cpu = 0.0
        self.done = asyncio.Event()

    def tick(self) -> None:
        if not self.seen:
            self.first = time.perf_counter()
            self.first_cpu = time.process_time()
        self.seen += 1
        if self.seen >= self.count:
            self.last = time.perf_counter()
            self.last_cpu = time.process_time()
            self.done.set()

    def rate(self) -> tuple[float, float]:
        """Messages a second by the wall clock, and by this process's CPU time."""
        handled = self.count - 1
        return handled / (self.last - self.first), handled / max(self.last_cpu - self.first_cpu, 1e-9)


async def app_side(url: str, count: int) -> tuple[float, float]:
    topic, sub = await fill(url, count)
    app = App(url)
    clock = Clock(count)

    @app.subscriber(topic, sub)
    async def handle(order: Order) -> None:
        clock.tick()

    async with app.lifespan(ping_timeout=None):
        await asyncio.wait_for(clock.done.wait(), 600)
    return clock.rate()


async def hand_side(url: str, count: int) -> tuple[float, float]:
    topic, sub = await fill(url, count)
    clock = Clock(count)
    decode = BINDING.decoder
    async with broker.connect(url) as backend:
        receiver = backend.receiver(topic, sub)

        async def handle(message: Message) -> None:
            decode(message.data)
            clock.tick()
            await message.ack()

        running = asyncio.create_task(receiver.receive(handle))
        await asyncio.wait_for(clock.done.wait(), 600)
        receiver.stop(30)
        await running
    return clock.rate()


def compare(label: str, url: str, count: int, rounds: int, peer: Callable[[], float] | None) -> None:
    rates: dict[str, list[float]] = {"app": [], "hand": [], "faststream": []}
    cpu_rates: dict[str, list[float]] = {"app": [], "hand": []}
    ratios: list[float] = []
    cpu_ratios: list[float] = []
    peer_ratios: list[float] = []
    sides = ["app", "hand"] + (["faststream"] if peer is not None else [])
    for round_ in range(rounds):
        shift = round_ % len(sides)
        got: dict[str, float] = {}
        got_cpu: dict[str, float] = {}
        for side in sides[shift:] + sides[:shift]:
            if side in ("app", "hand"):
                got[side], got_cpu[side] = in_own_process(side, url, count)
            else:
                assert peer is not None
                got[side] = peer()
            rates[side].append(got[side])
        for side, cpu_rate in got_cpu.items():
            cpu_rates[side].append(cpu_rate)
        ratios.append(got["app"] / got["hand"])
        cpu_ratios.append(got_cpu["app"] / got_cpu["hand"])
        if peer is not None:
            peer_ratios.append(got["app"] / got["faststream"])
        print(
            f"  round {round_ + 1}: "
            + "  ".join(f"{k} {v:,.0f}/s" for k, v in got.items())
            + "  (cpu: "
            + "  ".join(f"{k} {v:,.0f}/s" for k, v in got_cpu.items())
            + ")",
            flush=True,
        )
    best = max(rates["app"]) / max(rates["hand"])
    print(
        f"{label:<8} app best {max(rates['app']):>9,.0f}/s  hand best {max(rates['hand']):>9,.0f}/s  "
        f"app/hand best {best:.3f} median {statistics.median(ratios):.3f} (target >= 0.95)"
    )
    cpu_best = max(cpu_rates["app"]) / max(cpu_rates["hand"])
    print(
        f"{label:<8} by CPU time: app/hand best {cpu_best:.3f} median {statistics.median(cpu_ratios):.3f} "
        "(messages a CPU-second of this process: a disturbed round's wall time has other work in it)"
    )
    if peer is not None:
        best_peer = max(rates["app"]) / max(rates["faststream"])
        print(
            f"{label:<8} faststream best {max(rates['faststream']):>9,.0f}/s  "
            f"app/faststream best {best_peer:.2f} median {statistics.median(peer_ratios):.2f} (target >= 3)"
        )


def in_own_process(side: str, url: str, count: int) -> tuple[float, float]:
    """One round of ``side`` (``app`` or ``hand``) in a new Python process: its rates (wall, CPU).

    The child fills its topic (an in-memory broker lives in the child) and runs the side; its
    start-up and imports are outside the clock.
    """
    done = subprocess.run(
        [sys.executable, __file__, "--side", side, "--url", url, "--count", str(count)],
        capture_output=True,
        text=True,
        check=False,
        timeout=900,
    )
    if done.returncode != 0:
        raise RuntimeError(f"the {side} side failed (exit {done.returncode}):\n{done.stderr}")
    rates = json.loads(done.stdout.strip().splitlines()[-1])
    return float(rates["wall"]), float(rates["cpu"])


def run_side(side: str, url: str, count: int) -> None:
    """The child's part of :func:`in_own_process`: run one round and print its rates as JSON."""
    run = app_side if side == "app" else hand_side
    wall, cpu = asyncio.run(run(url, count))
    print(json.dumps({"wall": wall, "cpu": cpu}), flush=True)


def faststream_side(python: Any, side: str, url: str, count: int) -> float:
    from peers import run_peer

    return float(run_peer(python, "peer_app.py", side, "--url", url, "--messages", str(count))["rate"])


@contextlib.contextmanager
def server(name: str) -> Iterator[str]:
    if name == "kafka":
        from broker.backends.kafka.registration import factory as kafka_factory

        with kafka_factory.dev_server() as kafka:
            # a group join on Tansu takes about half the session timeout: keep it short
            yield f"{kafka.url}?session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1"
    else:
        from broker.backends.jetstream.registration import factory as nats_factory

        with nats_factory.dev_server() as nats:
            yield nats.url


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=20_000, help="messages per in-memory round")
    parser.add_argument("--server-messages", type=int, default=10_000, help="messages per Kafka/NATS round")
    parser.add_argument("--rounds", type=int, default=12, help="in-memory rounds")
    parser.add_argument("--server-rounds", type=int, default=7, help="Kafka and NATS rounds")
    parser.add_argument("--no-kafka", action="store_true")
    parser.add_argument("--no-nats", action="store_true")
    parser.add_argument("--no-peers", action="store_true", help="skip the FastStream sides")
    parser.add_argument("--side", choices=["app", "hand"], help=argparse.SUPPRESS)  # a round's child
    parser.add_argument("--url", help=argparse.SUPPRESS)
    parser.add_argument("--count", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.side:
        run_side(args.side, args.url, args.count)
        return
    python: Any = None
    if not args.no_peers:
        from peers import peer_python

        python = peer_python()
    compare("inmem", f"inmem://app-bench-{uuid.uuid4().hex[:8]}", args.messages, args.rounds, None)
    for name in ("kafka", "nats"):
        if getattr(args, f"no_{name}"):
            continue
        with server(name) as url:
            peer = None
            if python is not None:
                peer = functools.partial(faststream_side, python, name, url, args.server_messages)
            compare(name, url, args.server_messages, args.server_rounds, peer)


if __name__ == "__main__":
    main()
