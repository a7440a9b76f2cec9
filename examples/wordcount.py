"""Word count with two processors and a view (goka's model on polybroker).

* ``splitter`` reads lines from ``lines`` and emits every word to ``words``, keyed by the word;
* ``wordcount`` counts each word in its group table (``wordcount-table``, an int64 per word);
* a ``View`` of the table prints the most frequent words.

Runs on the in-memory broker by default; ``--url kafka://127.0.0.1:9092`` runs the same code on
Kafka. Usage: python examples/wordcount.py [--url URL] [--partitions N]
"""

from __future__ import annotations

import argparse
import asyncio
import re

import broker
from broker.backends.kafka.processor import (
    Context,
    Emitter,
    Processor,
    View,
    define_group,
    input,
    output,
    persist,
)
from broker.testing import wait_until

TEXT = """\
It was the best of times, it was the worst of times, it was the age of wisdom,
it was the age of foolishness, it was the epoch of belief, it was the epoch of incredulity,
it was the season of Light, it was the season of Darkness, it was the spring of hope,
it was the winter of despair, we had everything before us, we had nothing before us.
"""


def split(ctx: Context, line: str) -> None:
    """Emit each word of the line, keyed by the word (so one instance counts it)."""
    for word in re.findall(r"[a-z']+", line.lower()):
        ctx.emit("words", word, 1)


def count(ctx: Context, increment: int) -> None:
    """Add to the word's counter in the group table."""
    ctx.set_value((ctx.value() or 0) + increment)


splitter = define_group("splitter", input("lines", "str", split), output("words", "int64"))
wordcount = define_group("wordcount", input("words", "int64", count), persist("int64"))


async def run(url: str, partitions: int) -> dict[str, int]:
    """Count the words of TEXT; returns the counts."""
    backend = broker.connect(url)
    async with backend:
        log = backend.log()
        for topic in ("lines", "words"):
            await log.create_topic(topic, partitions)
        async with Processor(log, splitter), Processor(log, wordcount):
            async with Emitter(log, "lines", "str") as emitter:
                for number, line in enumerate(TEXT.splitlines()):
                    emitter.emit(f"line-{number}", line)
            expected = len(re.findall(r"[a-z']+", TEXT.lower()))
            async with View(log, wordcount.table_topic, "int64") as view:
                await view.wait_running(30)
                await wait_until(lambda: sum(v for _, v in view.iterate()) >= expected, 30)
                return dict(view.iterate())


def main() -> None:
    """Run the word count and print the top words."""
    parser = argparse.ArgumentParser(description="word count with processors, an emitter and a view")
    parser.add_argument("--url", default="inmem://wordcount")
    parser.add_argument("--partitions", type=int, default=3)
    args = parser.parse_args()
    counts = asyncio.run(run(args.url, args.partitions))
    for word, n in sorted(counts.items(), key=lambda item: (-item[1], item[0]))[:10]:
        print(f"{n:3d} {word}")


if __name__ == "__main__":
    main()
