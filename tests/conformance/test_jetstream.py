"""The conformance suite on NATS JetStream, against a real nats-server."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

import broker
from broker.devserver import ProcessServer
from broker.interfaces import MessageIterator
from broker.testing import ConformanceSuite, Harness
from tests.integration.jetstream.server import running_nats_server


class JetStreamHarness(Harness):
    """Maps the suite's ack deadline onto the consumer's ``ack_wait``."""

    def messages(
        self, topic: str, subscription: str, *, ack_deadline: float | None = None
    ) -> MessageIterator:
        options: dict[str, Any] = {}
        if ack_deadline is not None:
            options["ack_wait"] = ack_deadline
        return self.backend.messages(topic, subscription, **options)

    def dead_letter_options(
        self, max_attempts: int, topic: str, *, source_topic: str, source_subscription: str
    ) -> dict[str, Any]:
        return {"max_deliver": max_attempts, "dead_letter_subject": topic}


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


class TestJetStreamConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, nats_server: ProcessServer) -> AsyncIterator[Harness]:
        async with broker.connect(nats_server.url) as backend:
            yield JetStreamHarness(
                backend,
                url=nats_server.url,
                short_ack_deadline=0.5,
                patience=10.0,
                bad_urls=[f"{nats_server.url}?ack_wait=soon", f"{nats_server.url}?batch_size=0"],
            )
