"""Fixtures shared by the marker-queue unit tests."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker.backends.inmem import InmemBackend, InmemLog


@pytest.fixture
async def log() -> AsyncIterator[InmemLog]:
    """The log port of a fresh in-memory backend (two partitions per topic by default)."""
    backend = broker.connect(f"inmem://queue-{uuid.uuid4().hex}?partitions=2")
    assert isinstance(backend, InmemBackend)
    async with backend:
        yield backend.log()
