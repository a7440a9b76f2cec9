"""The conformance suite on NATS JetStream, against a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.devserver import ProcessServer
from broker.testing import ConformanceSuite, Harness
from tests.integration.jetstream.server import running_nats_server


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


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
            )
