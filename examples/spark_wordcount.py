"""Word count on Spark: the processor groups of examples/wordcount.py, run by ``contrib.spark.run_group``.

* ``splitter`` reads lines from ``lines`` and emits every word to ``words``, keyed by the word;
* ``wordcount`` counts each word in its group table (Spark state, written to ``wordcount-table``);
* a single-machine :class:`~broker.backends.kafka.processor.View` then reads ``wordcount-table``: what
  Spark computed is an ordinary group table that the processor and views can take over.

The callbacks are the same functions a single-machine ``Processor`` runs. Each group is one
Structured Streaming query; ``trigger={"availableNow": True}`` processes what is there and stops
(leave it out to keep the query running). Checkpoints keep offsets and tables: run again with
the same ``--workdir`` and only new lines are counted.

Usage: python examples/spark_wordcount.py [--url kafka://host:9092] [--workdir DIR]
(without ``--url`` a local Kafka-compatible broker, Tansu, is started; needs Java 17 for Spark)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import tempfile
from pathlib import Path
from typing import Any

import broker
import broker.contrib.spark
from broker.backends.kafka.processor import Context, GroupGraph, View, define_group, input, output, persist

TEXT = """\
It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity,
it was the season of Light, it was the season of Darkness, it was the spring of hope,
it was the winter of despair, we had everything before us, we had nothing before us.
"""


def graphs(prefix: str = "") -> tuple[GroupGraph, GroupGraph]:
    """The two groups; ``prefix`` is put before every topic and group name."""
    lines, words = f"{prefix}lines", f"{prefix}words"

    def split(ctx: Context, line: str) -> None:
        """Emit each word of the line, keyed by the word (so one key's counter sees all of it)."""
        for word in re.findall(r"[a-z']+", line.lower()):
            ctx.emit(words, word, 1)

    def count(ctx: Context, increment: int) -> None:
        """Add to the word's counter in the group table."""
        ctx.set_value((ctx.value() or 0) + increment)

    splitter = define_group(f"{prefix}splitter", input(lines, "str", split), output(words, "int64"))
    counter = define_group(f"{prefix}wordcount", input(words, "int64", count), persist("int64"))
    return splitter, counter


async def publish_lines(config: dict[str, Any], topic: str, words: str, lines: list[str]) -> None:
    """Create the topics (two partitions, co-partitioned) and publish the lines."""
    backend = broker.connect(config)
    async with backend:
        log = backend.log()
        for name in (topic, words):
            await log.create_topic(name, 2)
        messages = [broker.OutboundMessage(text.encode(), f"line-{n}") for n, text in enumerate(lines)]
        await backend.publisher().topic(topic).batch_publish(*messages)


async def read_table(config: dict[str, Any], table: str) -> dict[str, int]:
    """The group table as a single-machine View sees it."""
    backend = broker.connect(config)
    async with backend:
        async with View(backend.log(), table, "int64") as view:
            await view.wait_running(60)
            return dict(view.iterate())


def run(spark: Any, config: dict[str, Any], workdir: str, *, prefix: str = "") -> dict[str, int]:
    """Count the words of TEXT on Spark; returns the ``wordcount`` table read back by a View."""
    splitter, counter = graphs(prefix)
    lines_topic = splitter.input_streams[0].topic
    asyncio.run(publish_lines(config, lines_topic, counter.input_streams[0].topic, TEXT.splitlines()))
    options = {"config": json.dumps(config)}  # the broker data source's options (see broker.contrib.spark)
    for graph in (splitter, counter):
        query = broker.contrib.spark.run_group(
            spark,
            graph,
            options=options,
            checkpoint=str(Path(workdir) / graph.group),
            trigger={"availableNow": True},
        )
        query.awaitTermination()
    return asyncio.run(read_table(config, counter.table_topic))


def main() -> None:
    """Run the word count on a local Spark and print the top words."""
    parser = argparse.ArgumentParser(description="word count with processor groups on Spark")
    parser.add_argument("--url", help="a Kafka URL (default: start a local Tansu)")
    parser.add_argument("--workdir", help="where the checkpoints live (default: a temporary directory)")
    args = parser.parse_args()
    server = None
    if args.url is None:
        from broker.backends.kafka.registration import factory

        server = factory.dev_server().start()
        # Tansu (the local development broker) reports a batched partition's end offset wrongly;
        # one record per produced batch keeps it exact. Real Kafka needs no such setting.
        config: dict[str, Any] = {"url": server.url, "producer_config": {"batch.num.messages": 1}}
    else:
        config = {"url": args.url}
    try:
        spark = broker.contrib.spark.local_session("spark-wordcount")
        with tempfile.TemporaryDirectory() as scratch:
            counts = run(spark, config, args.workdir or scratch)
        spark.stop()
    finally:
        if server is not None:
            server.stop()
    for word, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]:
        print(f"{n:3d} {word}")


if __name__ == "__main__":
    main()
