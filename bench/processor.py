"""Stateful word count: our processor against Quix Streams on the same Kafka-compatible broker.

One run: start Tansu (the Kafka backend's dev server) unless ``--kafka HOST:PORT`` is given,
write ``--messages`` keyed records (default 200,000; keys drawn from ``--words`` distinct words,
fixed seed) to one input topic with ``--partitions`` partitions, then count messages per key
in a group table with

* **ours**: ``broker.backends.kafka.processor.Processor`` on ``broker.connect(url).log()``, LMDB
  storage, the ``<group>-table`` topic as changelog;
* **Quix Streams**: ``Application`` + ``StreamingDataFrame.update(..., stateful=True)``, RocksDB
  state with its changelog topic (defaults, at-least-once).

Both read the same input topic in their own consumer group, one after the other. Quix Streams
pins a confluent-kafka older than the project's, so it runs in its own virtualenv (``--quix-python``,
default ``.venv/quix/bin/python``; create it with ``--setup-quix``), as a child process running this
file with ``--quix-worker``.

Reported per side: *processing* throughput (first to last callback; the headline ratio) and
*wall* throughput (from start, so group join, topic creation and state opening included); each
side checks that its counts add up to the number of messages. Also printed: the same callbacks
through the ``Tester`` (no broker), one ``consume`` per message and in bulk.

Usage: python bench/processor.py [--messages N] [--partitions P] [--words W] [--setup-quix]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_QUIX_PYTHON = ROOT / ".venv" / "quix" / "bin" / "python"
QUIX_VERSION = "3.28.1"
#: The same group timeouts for both sides: a group join on Tansu takes about session.timeout / 2.
GROUP_TIMEOUTS = {"session.timeout.ms": 6000, "heartbeat.interval.ms": 1000}


def make_words(count: int, vocabulary: int, seed: int = 42) -> list[str]:
    rnd = random.Random(seed)
    # log-uniform over the vocabulary: skewed like text (a few words are frequent, most are rare)
    return [f"word{int(vocabulary ** rnd.random()) - 1}" for _ in range(count)]


# -- the Quix Streams side (runs in the Quix virtualenv) ------------------------------------
def quix_worker(args: argparse.Namespace) -> None:
    import logging

    from quixstreams import Application  # type: ignore[import-not-found, unused-ignore]

    logging.getLogger("quixstreams").setLevel(logging.WARNING)
    state_dir = tempfile.mkdtemp(prefix="quix-state-")
    app = Application(
        broker_address=args.broker,
        consumer_group=args.group,
        auto_offset_reset="earliest",
        state_dir=state_dir,
        loglevel="WARNING",
        consumer_extra_config=dict(GROUP_TIMEOUTS),
    )
    topic = app.topic(args.topic, key_deserializer="str", value_deserializer="bytes")
    sdf = app.dataframe(topic)
    marks: dict[str, float] = {}
    counts: dict[str, int] = {}
    seen = [0]

    def count(value: bytes, key: str, timestamp: int, headers: Any, state: Any) -> None:
        if not seen[0]:
            marks["first"] = time.perf_counter()
        total = state.get("count", 0) + 1
        state.set("count", total)
        counts[key] = total
        seen[0] += 1
        if seen[0] == args.messages:
            marks["last"] = time.perf_counter()
            app.stop()

    sdf.update(count, stateful=True, metadata=True)
    marks["start"] = time.perf_counter()
    app.run()
    marks["end"] = time.perf_counter()
    print(
        json.dumps(
            {
                "processed": seen[0],
                "counted": sum(counts.values()),
                "first": marks["first"] - marks["start"],
                "last": marks["last"] - marks["start"],
                "end": marks["end"] - marks["start"],
            }
        )
    )


def run_quix(python: Path, bootstrap: str, topic: str, messages: int) -> dict[str, Any]:
    command = [
        str(python),
        str(Path(__file__).resolve()),
        "--quix-worker",
        "--broker",
        bootstrap,
        "--topic",
        topic,
        "--group",
        f"quix-{uuid.uuid4().hex[:8]}",
        "--messages",
        str(messages),
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=1800, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the Quix worker failed ({done.returncode}):\n{done.stderr[-4000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def setup_quix(python: Path) -> None:
    venv = python.parent.parent
    uv = ROOT / ".venv" / "bin" / "uv"
    if not python.exists():
        subprocess.run([str(uv), "venv", "--python", sys.executable, str(venv)], check=True)
    subprocess.run(
        [str(uv), "pip", "install", "--python", str(python), f"quixstreams=={QUIX_VERSION}"], check=True
    )


# -- our side ------------------------------------------------------------------------------
def count_words(ctx: Any, msg: Any) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


async def produce(log: Any, topic: str, partitions: int, words: list[str]) -> float:
    from broker.driver.partitioning import partition_for

    # Quix Streams derives its changelog config from the input's retention.ms, which Tansu
    # reports only when it was set at creation.
    await log.create_topic(topic, partitions, config={"retention.ms": "-1", "retention.bytes": "-1"})
    start = time.perf_counter()
    send = log.send
    futures = [send(topic, b"1", key=w, partition=partition_for(w.encode(), partitions)) for w in words]
    for future in futures:
        await future
    await log.flush(60)
    return time.perf_counter() - start


async def run_ours(log: Any, topic: str, partitions: int, messages: int, storage_dir: str) -> dict[str, Any]:
    from broker.backends.kafka.processor import Processor, define_group, input, lmdb_storage, persist

    marks: dict[str, float] = {}
    seen = [0]

    def count(ctx: Any, msg: Any) -> None:
        if not seen[0]:
            marks["first"] = time.perf_counter()
        ctx.set_value((ctx.value() or 0) + 1)
        seen[0] += 1
        if seen[0] == messages:
            marks["last"] = time.perf_counter()

    group = f"ours-{uuid.uuid4().hex[:8]}"
    graph = define_group(group, input(topic, "bytes", count), persist("int64"))
    proc = Processor(log, graph, storage=lmdb_storage(storage_dir))
    marks["start"] = time.perf_counter()
    task = proc.start()
    async with asyncio.timeout(1800):
        while seen[0] < messages:
            if task.done():
                task.result()
            await asyncio.sleep(0.01)
    from broker.log import TopicPartition

    tps = [TopicPartition(topic, p) for p in range(partitions)]
    async with asyncio.timeout(60):
        while sum(v or 0 for v in (await log.committed(group, tps)).values()) < messages:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    counted = sum(v for part in proc._parts.values() if part.store for _, v in _decoded(part.store))
    await proc.stop()
    marks["end"] = time.perf_counter()
    return {
        "processed": seen[0],
        "counted": counted,
        "first": marks["first"] - marks["start"],
        "last": marks["last"] - marks["start"],
        "end": marks["end"] - marks["start"],
    }


def _decoded(store: Any) -> Any:
    return ((k, int(v)) for k, v in store.iterate())


async def run_tester(words: list[str]) -> tuple[float, float, int]:
    from broker.backends.kafka.processor import Tester, define_group, input, persist

    graph = define_group("tester-wc", input("words", "bytes", count_words), persist("int64"))
    single = words[: min(len(words), 20_000)]
    async with Tester(partitions=4) as tester:
        await tester.processor(graph)
        start = time.perf_counter()
        for word in single:
            await tester.consume("words", word, b"1")
        one_by_one = len(single) / (time.perf_counter() - start)
    async with Tester(partitions=4) as tester:
        await tester.processor(graph)
        start = time.perf_counter()
        await tester.consume_many("words", [(w, b"1") for w in words])
        bulk = len(words) / (time.perf_counter() - start)
        total = sum(tester.table_value("tester-wc-table", k) for k in set(words))
    return one_by_one, bulk, total


def rates(result: dict[str, Any], messages: int) -> tuple[float, float]:
    processing = messages / (result["last"] - result["first"])
    wall = messages / result["last"]
    return processing, wall


async def main_async(args: argparse.Namespace) -> None:
    import broker

    words = make_words(args.messages, args.words)
    distinct = len(set(words))
    server = None
    if args.kafka:
        bootstrap = args.kafka
    else:
        from broker.backends.kafka.registration import factory

        server = factory.dev_server()
        server.__enter__()
        bootstrap = server.url.removeprefix("kafka://")
    try:
        session = GROUP_TIMEOUTS["session.timeout.ms"] / 1000
        heartbeat = GROUP_TIMEOUTS["heartbeat.interval.ms"] / 1000
        backend: Any = broker.connect(
            f"kafka://{bootstrap}?session_timeout={session}&heartbeat_interval={heartbeat}"
        )
        async with backend:
            log = backend.log()
            topic = f"bench-words-{uuid.uuid4().hex[:8]}"
            produced = await produce(log, topic, args.partitions, words)
            print(
                f"input: {args.messages:,} messages, {distinct:,} distinct keys, "
                f"{args.partitions} partitions (produced in {produced:.1f}s) on {bootstrap}"
            )
            quix = (
                run_quix(Path(args.quix_python), bootstrap, topic, args.messages)
                if not args.skip_quix
                else None
            )
            with tempfile.TemporaryDirectory(prefix="bench-lmdb-") as storage_dir:
                ours = await run_ours(log, topic, args.partitions, args.messages, storage_dir)
    finally:
        if server is not None:
            server.__exit__(None, None, None)
    rows = [("ours (Processor, LMDB)", ours)] + ([("Quix Streams " + QUIX_VERSION, quix)] if quix else [])
    print(f"{'side':28s} {'processing msg/s':>17s} {'wall msg/s':>11s} {'first msg':>10s} {'counted':>9s}")
    for name, result in rows:
        processing, wall = rates(result, args.messages)
        ok = "ok" if result["counted"] == args.messages else f"WRONG {result['counted']}"
        print(f"{name:28s} {processing:17,.0f} {wall:11,.0f} {result['first']:9.2f}s {ok:>9s}")
    if quix:
        ours_rate, ours_wall = rates(ours, args.messages)
        quix_rate, quix_wall = rates(quix, args.messages)
        print(
            f"ratio ours/Quix: {ours_rate / quix_rate:.2f} (processing), {ours_wall / quix_wall:.2f} (wall)"
        )
    one_by_one, bulk, total = await run_tester(words)
    assert total == args.messages, total
    print(
        f"Tester (no broker): {one_by_one:,.0f} msg/s one consume() per message, "
        f"{bulk:,.0f} msg/s consume_many()"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=200_000)
    parser.add_argument("--partitions", type=int, default=4)
    parser.add_argument("--words", type=int, default=10_000, help="size of the key vocabulary")
    parser.add_argument("--kafka", help="HOST:PORT of a running broker (default: start Tansu)")
    parser.add_argument("--quix-python", default=os.environ.get("QUIX_PYTHON", str(DEFAULT_QUIX_PYTHON)))
    parser.add_argument("--setup-quix", action="store_true", help="create the Quix virtualenv first")
    parser.add_argument("--skip-quix", action="store_true")
    parser.add_argument("--quix-worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--broker", help=argparse.SUPPRESS)
    parser.add_argument("--topic", help=argparse.SUPPRESS)
    parser.add_argument("--group", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quix_worker:
        quix_worker(args)
        return
    if args.setup_quix:
        setup_quix(Path(args.quix_python))
    if not args.skip_quix and not Path(args.quix_python).exists():
        parser.error(f"no Quix Streams interpreter at {args.quix_python}; run with --setup-quix")
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
