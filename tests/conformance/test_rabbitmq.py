"""The conformance suite on RabbitMQ, against a real rabbitmq-server (Debian's, on loopback)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

import broker
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.integration.rabbitmq.server import running_rabbitmq_server


@pytest.fixture(scope="module")
def rabbitmq_server() -> Iterator[RabbitmqDevServer]:
    with running_rabbitmq_server() as server:
        yield server


@contextmanager
def own_rabbitmq_server() -> Iterator[KillableServer]:
    """A rabbitmq-server for one test, which it may kill."""
    with running_rabbitmq_server() as server:
        yield killable(server, f"{server.url}?publish_timeout=4&close_timeout=4&connect_timeout=4")


class TestRabbitmqConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, rabbitmq_server: RabbitmqDevServer) -> AsyncIterator[Harness]:
        url = rabbitmq_server.url
        async with broker.connect(url) as backend:
            yield Harness(
                backend,
                url=url,
                short_ack_deadline=0.5,  # a client-side timer: any deadline works
                patience=10.0,
                bad_urls=[f"{url}?ack_deadline=soon", f"{url}?prefetch=0", "rabbitmq://h:port/"],
                own_server=own_rabbitmq_server,
                dead_server_bound=10.0,
            )
