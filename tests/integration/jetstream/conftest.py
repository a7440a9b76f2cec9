"""Fixtures of the JetStream integration tests: one nats-server for the session, a backend per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.backends.jetstream.backend import JetStreamBackend
from broker.driver.devserver import ProcessServer
from tests.integration.jetstream.server import running_nats_server


@pytest.fixture(scope="session")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


@pytest.fixture
async def backend(nats_server: ProcessServer) -> AsyncIterator[JetStreamBackend]:
    connected = broker.connect(nats_server.url)
    assert isinstance(connected, JetStreamBackend)
    async with connected:
        yield connected
