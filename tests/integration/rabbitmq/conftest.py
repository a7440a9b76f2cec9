"""Fixtures of the RabbitMQ integration tests: one rabbitmq-server for the module, a backend per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.backends.rabbitmq.backend import RabbitmqBackend
from tests.integration.rabbitmq.server import running_rabbitmq_server


@pytest.fixture(scope="package")
def rabbitmq_server() -> Iterator[RabbitmqDevServer]:
    with running_rabbitmq_server() as server:
        yield server


@pytest.fixture
async def backend(rabbitmq_server: RabbitmqDevServer) -> AsyncIterator[RabbitmqBackend]:
    connected = broker.connect(rabbitmq_server.url)
    assert isinstance(connected, RabbitmqBackend)
    async with connected:
        yield connected
