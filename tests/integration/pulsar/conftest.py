"""Fixtures of the Pulsar integration tests: one pulsar-lite for the session, a backend per test."""

from __future__ import annotations

import importlib.util
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING

import pytest

import broker

if TYPE_CHECKING:
    from broker.backends.pulsar.backend import PulsarBackend
    from tests.integration.pulsar.server import PulsarTestServer

if importlib.util.find_spec("pulsar") is None:  # the pulsar extra is not installed
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(scope="session")
def pulsar() -> Iterator[PulsarTestServer]:
    """The Pulsar server of the session (pulsar-lite unless ``PULSAR_URL`` is set)."""
    from tests.integration.pulsar.server import pulsar_server

    yield from pulsar_server()


@pytest.fixture
async def backend(pulsar: PulsarTestServer) -> AsyncIterator[PulsarBackend]:
    """A backend whose nacked messages come back after 0.2 s."""
    async with broker.connect(f"{pulsar.url}?nack_redelivery_delay=0.2") as opened:
        yield opened  # type: ignore[misc]


@pytest.fixture
def name() -> Callable[..., str]:
    """Makes names unique to the test: ``name("topic")``."""
    run = uuid.uuid4().hex[:8]
    return lambda prefix="t": f"{prefix}-{run}-{uuid.uuid4().hex[:6]}"
