"""The broker.log port on Kafka (Tansu): the shared suite of broker.driver.testing.log_port.

Waits are longer than in memory (group joins take about a second), and the default assignment
strategies rebalance eagerly. The log uses the one-record-per-batch producer (``exact_backend``),
because the suite reads high watermarks (Tansu's watermark bug).

Nothing here is Kafka-only: every behaviour the Kafka copy of these tests checked is in the suite.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping

import pytest

from broker.backends.kafka import sdk
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.log import KafkaLog
from broker.driver.testing.log_port import LogHarness, LogPortSuite


class KafkaLogHarness(LogHarness):
    """Reads topic settings with the admin client's ``describe_configs``."""

    async def topic_config(self, topic: str) -> Mapping[str, str] | None:
        assert isinstance(self.log, KafkaLog)
        admin = sdk.admin_module()
        resource = admin.ConfigResource("topic", topic)
        (future,) = self.log.admin.client.describe_configs([resource]).values()
        configs = await asyncio.wrap_future(future)
        return {name: entry.value for name, entry in configs.items()}


class TestKafkaLogPort(LogPortSuite):
    @pytest.fixture
    async def log_harness(self, exact_backend: KafkaBackend) -> AsyncIterator[LogHarness]:
        async with exact_backend.log() as log:
            cooperative = log.settings.consumer_options().cooperative
            yield KafkaLogHarness(
                log,
                patience=15.0,
                quiet=1.0,
                rebalance="incremental" if cooperative else "eager",
                # librdkafka notices a created topic at its next metadata refresh (default: every
                # 5 minutes, like Java's metadata.max.age.ms); a member that waits for topics to
                # appear lowers it.
                missing_topic_options={"consumer_config": {"topic.metadata.refresh.interval.ms": 500}},
            )
