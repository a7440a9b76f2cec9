"""Fixtures of the SQS integration tests: one moto server (the fake) for the package, a backend per test."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.backends.sqs.backend import SqsBackend
from broker.driver.devserver import ProcessServer
from tests.integration.sqs.server import running_moto_server_fake


@pytest.fixture(scope="package")
def moto_server_fake() -> Iterator[ProcessServer]:
    with running_moto_server_fake() as server:
        yield server


@pytest.fixture
async def backend(moto_server_fake: ProcessServer) -> AsyncIterator[SqsBackend]:
    connected = broker.connect(f"{moto_server_fake.url}&wait_time=1")
    assert isinstance(connected, SqsBackend)
    async with connected:
        yield connected


@pytest.fixture
async def sns_backend(moto_server_fake: ProcessServer) -> AsyncIterator[SqsBackend]:
    """A backend in SNS mode (the default) whose receives long-poll one second."""
    connected = broker.connect(f"{moto_server_fake.url}&wait_time=1")
    assert isinstance(connected, SqsBackend)
    async with connected:
        yield connected
