"""Schema evolution on NATS JetStream and RabbitMQ: registry-framed values on brokers other than Kafka
(whose keys are text: a registry-framed key is refused with ``NotSupported``)."""

from __future__ import annotations

import pytest

import broker
from broker import schemas
from broker.driver.testing.harness import Harness, collect, subscribed_topic
from broker.errors import NotSupported
from tests.integration.schemas.evolution import FORMATS, scenario, tag_message
from tests.unit.schemas.support import KEY_AVRO


async def _run(url: str, fmt: str) -> None:
    case = scenario(fmt)
    async with broker.connect(url) as backend:
        harness = Harness(backend, url=url)
        topic, sub = await subscribed_topic(harness, case.topic)
        case.topic = topic
        with pytest.raises(NotSupported, match="Kafka"):
            schemas.topic(
                backend.publisher(), topic, case.v1, key=schemas.avro(case.v1.registry, KEY_AVRO, field="key")
            )
        await case.publish(backend.publisher())
        async with backend.messages(topic, sub) as consumer:
            received = await collect(consumer, 2, 15.0)
    await case.check(received, tag_message)


@pytest.mark.parametrize("fmt", FORMATS)
async def test_evolution_on_jetstream(nats_server: object, fmt: str) -> None:
    await _run(nats_server.url, fmt)  # type: ignore[attr-defined]


@pytest.mark.parametrize("fmt", FORMATS)
async def test_evolution_on_rabbitmq(rabbitmq_server: object, fmt: str) -> None:
    await _run(rabbitmq_server.url, fmt)  # type: ignore[attr-defined]
