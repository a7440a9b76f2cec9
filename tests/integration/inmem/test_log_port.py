"""The broker.log port on the in-memory broker: the shared suite, plus what only memory promises.

The in-memory log is instant (a write or a group change is seen by the next poll, so the suite
asserts single polls with ``timeout=0``) and rebalances incrementally (only partitions that move
are revoked and assigned).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Mapping

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog
from broker.driver.testing.log_port import LogHarness, LogPortSuite
from broker.log import OFFSET_BEGINNING, OFFSET_END, TopicPartition


class InmemLogHarness(LogHarness):
    """Reads topic settings from the in-memory broker's state."""

    async def topic_config(self, topic: str) -> Mapping[str, str] | None:
        assert isinstance(self.log, InmemLog)
        return self.log.broker.topics[topic].config


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    backend = broker.connect(f"inmem://log-{uuid.uuid4().hex}")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()


class TestInmemLogPort(LogPortSuite):
    @pytest.fixture
    def log_harness(self, log: InmemLog) -> LogHarness:
        return InmemLogHarness(log, patience=5.0, quiet=0.05, instant=True, rebalance="incremental")


# Not in the suite: the port lets a client library return OFFSET_BEGINNING / OFFSET_END from
# position() until its first poll resolves them (Kafka does); the in-memory log resolves them
# when the partition is assigned, and this pins that down.
async def test_reader_resolves_offset_sentinels_at_assign(log: InmemLog) -> None:
    await log.create_topic("r", 1)
    for i in range(5):
        await log.produce("r", str(i).encode())
    tp = TopicPartition("r", 0)
    reader = log.reader()
    reader.assign({tp: OFFSET_END})
    assert reader.position(tp) == 5
    reader.assign({tp: OFFSET_BEGINNING})
    assert reader.position(tp) == 0
    await reader.close()
