"""Fixtures of the Kafka integration tests: one Tansu for the session, a backend per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.driver.devserver import ProcessServer
from tests.integration.kafka.support import ONE_RECORD_PER_BATCH, TEST_QUERY, tansu


@pytest.fixture(scope="session")
def tansu_server() -> Iterator[ProcessServer]:
    with tansu() as server:
        yield server


@pytest.fixture
def config(tansu_server: ProcessServer) -> dict[str, Any]:
    """librdkafka config for the helpers (they take raw configs, like kefka)."""
    return {"bootstrap.servers": tansu_server.url.removeprefix("kafka://")}


@pytest.fixture
def kafka_url(tansu_server: ProcessServer) -> str:
    return f"{tansu_server.url}?{TEST_QUERY}"


@pytest.fixture
async def backend(kafka_url: str) -> AsyncIterator[KafkaBackend]:
    opened = broker.connect(kafka_url)
    assert isinstance(opened, KafkaBackend)
    async with opened:
        yield opened


@pytest.fixture
async def exact_backend(kafka_url: str) -> AsyncIterator[KafkaBackend]:
    """A backend whose producers send one record per batch (Tansu's watermark bug)."""
    opened = broker.connect({"url": kafka_url, "producer_config": ONE_RECORD_PER_BATCH})
    assert isinstance(opened, KafkaBackend)
    async with opened:
        yield opened


@pytest.fixture(autouse=True)
def data_dir(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Default processor and view stores (on disk on Kafka) go to a temporary data directory."""
    path = tmp_path_factory.mktemp("polybroker-data")
    monkeypatch.setenv("POLYBROKER_DATA_DIR", str(path))
    return path
