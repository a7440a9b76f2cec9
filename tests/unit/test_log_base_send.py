"""``LogBase.send`` checks a record before any log writes it, so every log refuses bad input alike."""

from __future__ import annotations

from typing import Any

import pytest

from broker.backends.inmem.log import InmemLog
from broker.backends.inmem.store import InmemBroker
from broker.driver.partitioning import partition_for
from broker.errors import InvalidMessage
from broker.log import TopicPartition


@pytest.mark.parametrize(
    ("value", "key", "attributes"),
    [("text", None, None), (b"v", 7, None), (b"v", None, {"n": 1})],
    ids=["str-value", "int-key", "int-attribute"],
)
async def test_the_inmem_log_refuses_a_bad_record_and_writes_nothing(
    value: Any, key: Any, attributes: Any
) -> None:
    async with InmemLog(InmemBroker("log-base-send"), partition_for) as log:
        await log.create_topic("t")
        with pytest.raises((InvalidMessage, TypeError)):
            await log.produce("t", value, key=key, attributes=attributes)
        assert await log.watermarks(TopicPartition("t", 0)) == (0, 0)
        assert await log.produce("t", b"ok", key="k") == (TopicPartition("t", 0), 0)
