"""Fixtures of the marker-queue integration tests: one Tansu for the folder, a log port per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.log import KafkaLog
from broker.driver.devserver import ProcessServer
from tests.integration.kafka.support import TEST_QUERY, tansu


@pytest.fixture(scope="session")
def queue_tansu() -> Iterator[ProcessServer]:
    with tansu() as server:
        yield server


@pytest.fixture
def kafka_url(queue_tansu: ProcessServer) -> str:
    return f"{queue_tansu.url}?{TEST_QUERY}"


@pytest.fixture
async def backend(kafka_url: str) -> AsyncIterator[KafkaBackend]:
    opened = broker.connect(kafka_url)
    assert isinstance(opened, KafkaBackend)
    async with opened:
        yield opened


@pytest.fixture
async def log(backend: KafkaBackend) -> KafkaLog:
    return backend.log()
