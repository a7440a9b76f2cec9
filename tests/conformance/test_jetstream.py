"""The conformance suite on NATS JetStream, against a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

import broker
from broker.driver.devserver import ProcessServer
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.integration.jetstream.server import running_nats_server


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


@contextmanager
def own_nats_server() -> Iterator[KillableServer]:
    """A nats-server for one test, which it may kill."""
    with running_nats_server() as server:
        yield killable(server, f"{server.url}?publish_timeout=4&close_timeout=4&request_timeout=4")


class TestJetStreamConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, nats_server: ProcessServer) -> AsyncIterator[Harness]:
        async with broker.connect(nats_server.url) as backend:
            yield Harness(
                backend,
                url=nats_server.url,
                short_ack_deadline=0.5,
                patience=10.0,
                bad_urls=[f"{nats_server.url}?ack_wait=soon", f"{nats_server.url}?batch_size=0"],
                own_server=own_nats_server,
                dead_server_bound=10.0,
            )
