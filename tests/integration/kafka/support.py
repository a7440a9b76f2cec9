"""Shared by the Kafka tests and the Kafka conformance module: the Tansu launcher and test settings."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from broker.backends.kafka.registration import factory
from broker.driver.devserver import ProcessServer

#: Group joins on Tansu cost about session.timeout/2 (servers.md §1); short fetch waits keep
#: single-record round trips fast (the default fetch_max_wait is 0.5 s).
TEST_QUERY = "session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1"

#: Tansu bug (servers.md §1, spark.md §4.1): its high watermark is the base offset of the last
#: record *batch* + 1. Tests that check watermarks, lag, message counts or start="latest" produce
#: one record per batch, so the reported watermark is the true one.
ONE_RECORD_PER_BATCH: dict[str, Any] = {"batch.num.messages": 1}

TANSU_HIGH_WATERMARK_BUG = (
    "Tansu 0.6 bug: the high watermark is the base offset of the last record batch + 1 (servers.md §1)"
)
TANSU_ABORTED_VISIBLE_BUG = (
    "Tansu 0.6 bug: records of aborted transactions stay visible to read_committed consumers "
    "(servers.md §1 (c); raw-client reproduction: tests/integration/kafka/test_broker_bugs.py)"
)


@contextmanager
def tansu() -> Iterator[ProcessServer]:
    """A started Tansu (through the factory's dev_server, as ``broker dev kafka`` does)."""
    with factory.dev_server() as server:
        yield server


def unique(prefix: str) -> str:
    """A topic or group name not used before."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"
