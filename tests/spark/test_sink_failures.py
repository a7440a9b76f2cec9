"""A sink task that fails after publishing: the replayed batch repeats rows with identical message ids."""

from __future__ import annotations

import collections
from pathlib import Path
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer
from tests.spark.support import (
    QUERY_TIMEOUT,
    kafka_backend,
    kafka_options,
    produce,
    read_jetstream,
    read_kafka,
    unique,
)

pytestmark = pytest.mark.timeout(240)

ROWS = 160


def _topic_failing_once(marker: Path, at: str, topic: str) -> Any:
    """A UDF giving each row its topic, except row ``at`` on the first attempt: no topic.

    The sink publishes the Arrow batches before that row's batch, then fails on the row (a UDF
    raising would fail the task before the sink saw anything: Python UDFs run ahead of it).
    """
    from pyspark.sql import functions as F

    def choose(value):  # type: ignore[no-untyped-def]  # no hints: PySpark reads them as pandas UDF types
        if value == at and not marker.exists():
            marker.write_text("failed")
            return ""
        return topic

    return F.udf(choose, "string")


@pytest.mark.parametrize("sink", ["kafka", "nats"])
def test_replayed_rows_carry_identical_ids(
    spark: Any, tansu: ProcessServer, nats: ProcessServer, tmp_path: Path, sink: str
) -> None:
    source = unique("fail-in")
    produce(
        kafka_backend(tansu.url), source, [("k", f"v{i:03d}".encode()) for i in range(ROWS)], partitions=1
    )
    if sink == "kafka":
        target = unique("fail-out")
        produce(kafka_backend(tansu.url), target, [], partitions=1)
        sink_options = kafka_options(tansu.url)
    else:
        target = unique("fail_out").replace("-", "_")
        sink_options = {"url": nats.url}
    topic_of = _topic_failing_once(tmp_path / "failed", f"v{ROWS - 10:03d}", target)
    checkpoint = str(tmp_path / "checkpoint")

    def run() -> Any:
        frame = (
            spark.readStream.format("broker")
            .options(**kafka_options(tansu.url))
            .option("topic", source)
            .load()
            .selectExpr("key", "cast(value as string) as value")
        )
        query = (
            frame.select("key", "value", topic_of("value").alias("topic"))
            .writeStream.format("broker")
            .options(**sink_options)
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        try:
            query.awaitTermination(QUERY_TIMEOUT)
        except Exception as exc:  # the injected failure stops the query (local mode: no task retries)
            return exc
        return None

    assert run() is not None, "the injected failure did not stop the query"
    assert run() is None  # the restart replays batch 0 with the same query id and batch id
    if sink == "kafka":
        records = read_kafka(tansu.url, target)
        id_attribute = "polybroker-msg-id"
    else:
        records = read_jetstream(nats.url, target)
        id_attribute = "Nats-Msg-Id"
    ids_by_value = collections.defaultdict(set)
    for record in records:
        ids_by_value[record.value].add(record.attributes[id_attribute])
    assert sorted(ids_by_value) == [f"v{i:03d}".encode() for i in range(ROWS)]  # nothing lost
    assert all(len(ids) == 1 for ids in ids_by_value.values())  # a repeated row has the same id
    if sink == "kafka":
        assert len(records) > ROWS, "the failed attempt published no rows before failing"
    else:
        assert len(records) == ROWS  # JetStream dropped the replayed copies by Nats-Msg-Id
