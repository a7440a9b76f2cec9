"""The conformance suite on the in-memory backend."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker.driver.testing import ConformanceSuite, Harness


class TestInmemConformance(ConformanceSuite):
    @pytest.fixture(params=[1, 3], ids=["1-partition", "3-partitions"])
    async def harness(self, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        url = f"inmem://conformance-{uuid.uuid4().hex}?partitions={request.param}"
        async with broker.connect(url) as backend:
            yield Harness(
                backend,
                url=url,
                short_ack_deadline=0.3,
                patience=5.0,
                bad_urls=["inmem://x?partitions=zero", "inmem://x?ack_deadline=-1"],
            )
