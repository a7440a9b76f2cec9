"""run_group: a processor group graph on Structured Streaming gives the single-machine processor's table."""

from __future__ import annotations

import asyncio
import runpy
from pathlib import Path
from typing import Any

import pytest

from broker.backends.kafka.processor import GroupGraph, Tester, define_group, input, join, persist
from broker.contrib.spark import UnsupportedOnSpark, run_group
from broker.driver.devserver import ProcessServer
from tests.spark.support import ONE_RECORD_PER_BATCH, read_kafka, unique

pytestmark = pytest.mark.timeout(300)

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_wordcount.py"


async def single_machine(splitter: GroupGraph, counter: GroupGraph, lines: list[str]) -> dict[str, int]:
    async with Tester(partitions=2) as tester:
        await tester.processor(splitter)
        await tester.processor(counter)
        items = [(f"line-{i}", text) for i, text in enumerate(lines)]
        await tester.consume_many(splitter.input_streams[0].topic, items)
        table = counter.table_topic
        return {key: tester.table_value(table, key) for key in tester.table_keys(table)}


def test_the_word_count_example_gives_the_single_machine_table(
    spark: Any, tansu: ProcessServer, tmp_path: Path
) -> None:
    # Loaded under a name outside sys.modules, so Spark pickles its callbacks by value.
    example = runpy.run_path(str(EXAMPLE), run_name="spark_wordcount_example")
    prefix = unique("wc") + "-"
    config = {"url": tansu.url, "producer_config": ONE_RECORD_PER_BATCH}
    on_spark = example["run"](spark, config, str(tmp_path), prefix=prefix)  # read back by a View
    lines = example["TEXT"].splitlines()
    expected = asyncio.run(single_machine(*example["graphs"](prefix), lines))
    assert on_spark == expected
    # Again, from the checkpoints: the same lines once more; the tables continue from Spark's state.
    again = example["run"](spark, config, str(tmp_path), prefix=prefix)
    assert again == {word: 2 * n for word, n in expected.items()}
    words = read_kafka(tansu.url, f"{prefix}words")
    assert len(words) == 2 * sum(expected.values())
    assert len({r.attributes["polybroker-msg-id"] for r in words}) == len(words)
    assert {r.attributes["polybroker-msg-id"].split(":")[0] for r in words} == {f"{prefix}splitter"}


def test_joins_are_refused_with_a_clear_error(spark: Any) -> None:
    graph = define_group("joiner", input("a", "str", lambda ctx, m: None), join("t", "str"), persist("str"))
    with pytest.raises(UnsupportedOnSpark, match="not supported on Spark yet"):
        run_group(spark, graph, url="kafka://127.0.0.1:1", checkpoint="/nonexistent")
