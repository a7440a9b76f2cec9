"""The ``log`` fixture of the processor integration tests.

Every test runs on the in-memory log and on a real Kafka-compatible broker (Tansu, started once
per session through the Kafka backend's ``dev_server()``; ``PROCESSOR_KAFKA=0`` skips that half
while iterating locally); producers there send one record per batch because Tansu reports the high
watermark of batched topics wrongly, and recovery reads up to the high watermark.
"""

from __future__ import annotations

import os
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import broker
from broker.log import Log

KAFKA = os.environ.get("PROCESSOR_KAFKA", "1") != "0"
#: Short group timeouts: a join on Tansu costs about session_timeout / 2.
KAFKA_QUERY = "session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.05"


@pytest.fixture(scope="session")
def kafka_url() -> Iterator[str]:
    from broker.backends.kafka.registration import factory

    with factory.dev_server() as server:
        yield f"{server.url}?{KAFKA_QUERY}"


@pytest.fixture(params=["inmem", pytest.param("kafka", marks=pytest.mark.slow)] if KAFKA else ["inmem"])
async def log(request: pytest.FixtureRequest) -> AsyncIterator[Log]:
    if request.param == "inmem":
        backend: Any = broker.connect(f"inmem://processor-it-{uuid.uuid4().hex}")
    else:
        url = request.getfixturevalue("kafka_url")
        backend = broker.connect({"url": url, "producer_config": {"batch.num.messages": 1}})
    async with backend:
        log = backend.log()
        assert isinstance(log, Log)
        yield log


@pytest.fixture
def names() -> Any:
    """A function making topic and group names unique to this test."""
    run = uuid.uuid4().hex[:8]
    return lambda name: f"{name}-{run}"


@pytest.fixture(autouse=True)
def data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Default processor and view stores (on disk on Kafka) go to a temporary data directory."""
    path = tmp_path_factory.mktemp("polybroker-data")
    monkeypatch.setenv("POLYBROKER_DATA_DIR", str(path))
    return path
