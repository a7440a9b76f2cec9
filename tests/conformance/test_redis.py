"""The conformance suite on Redis Streams, against a real redis-server (Debian's, on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

import broker
from broker.driver.devserver import ProcessServer
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.integration.redis.server import running_redis_server


@pytest.fixture(scope="module")
def redis_server() -> Iterator[ProcessServer]:
    with running_redis_server() as server:
        yield server


@contextmanager
def own_redis_server() -> Iterator[KillableServer]:
    """A redis-server for one test, which it may kill."""
    with running_redis_server() as server:
        yield killable(
            server,
            f"{server.url}?publish_timeout=4&close_timeout=4&connect_timeout=4&command_timeout=4",
        )


class TestRedisConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, redis_server: ProcessServer) -> AsyncIterator[Harness]:
        url = f"{redis_server.url}?poll_interval=0.2"
        async with broker.connect(url) as backend:
            yield Harness(
                backend,
                url=url,
                short_ack_deadline=1.0,  # idle time in milliseconds: any deadline works
                patience=10.0,
                bad_urls=[
                    f"{redis_server.url}?ack_deadline=soon",
                    f"{redis_server.url}/notanumber",
                    f"{redis_server.url}?poll_interval=0",
                    "redis://h:port/",
                ],
                own_server=own_redis_server,
                dead_server_bound=10.0,
            )
