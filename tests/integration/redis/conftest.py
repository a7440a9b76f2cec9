"""Fixtures of the Redis integration tests: one redis-server for the package, a backend per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.backends.redis.backend import RedisBackend
from broker.driver.devserver import ProcessServer
from tests.integration.redis.server import running_redis_server


@pytest.fixture(scope="package")
def redis_server() -> Iterator[ProcessServer]:
    with running_redis_server() as server:
        yield server


@pytest.fixture
async def backend(redis_server: ProcessServer) -> AsyncIterator[RedisBackend]:
    connected = broker.connect(f"{redis_server.url}?poll_interval=0.1")
    assert isinstance(connected, RedisBackend)
    async with connected:
        yield connected
