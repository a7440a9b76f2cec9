"""The conformance suite on the in-memory backend."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker.testing import ConformanceSuite, Harness


class TestInmemConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self) -> AsyncIterator[Harness]:
        async with broker.connect(f"inmem://conformance-{uuid.uuid4().hex}?partitions=3") as backend:
            yield Harness(
                backend, short_ack_deadline=0.3, patience=5.0, bad_urls=["inmem://x?partitions=zero"]
            )
