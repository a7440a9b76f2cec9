"""The conformance suite passes on an instrumented in-memory backend (with the SDK recording)."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator

import pytest

import broker
from broker import OutboundMessage
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import collect
from broker.telemetry import instrument
from tests.unit.telemetry.conftest import Otel


class TestInstrumentedInmemConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, otel: Otel) -> AsyncIterator[Harness]:
        url = f"inmem://conformance-otel-{uuid.uuid4().hex}?partitions=3"
        plain = broker.connect(url)
        async with instrument(
            plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider
        ) as backend:
            yield Harness(
                backend,  # type: ignore[arg-type]
                url=url,
                short_ack_deadline=0.3,
                patience=5.0,
                bad_urls=["inmem://x?partitions=zero", "inmem://x?ack_deadline=-1"],
            )

    async def test_round_trip_data_key_attributes(self, harness: Harness) -> None:
        """As the suite's, except that each message also carries its publish span's traceparent."""
        topic = f"rt-{uuid.uuid4().hex}"
        async with harness.messages(topic, "s") as consumer:
            publisher = harness.backend.publisher()
            sent = [
                OutboundMessage(b"hello", key="k1", attributes={"a": "1", "trace": "xyz"}),
                OutboundMessage(b"", key=None),
                OutboundMessage("naïve ☃ 東京".encode(), key="ключ", attributes={"lang": "ünï"}),
            ]
            for message in sent:
                await publisher.topic(topic).publish(message)
            got = await collect(consumer, len(sent), harness.patience)
        by_data = {m.data: m for m in got}
        for out in sent:
            received = by_data[out.data]
            assert received.key == out.key
            attributes = dict(received.attributes)
            assert attributes.pop("traceparent").startswith("00-")
            assert attributes == dict(out.attributes)
        assert dict(sent[0].attributes) == {"a": "1", "trace": "xyz"}  # the caller's message is not changed
