"""The application layer's conformance subset (:class:`broker.driver.testing.app.AppConformanceSuite`)
on every backend.

Each class borrows the ``harness`` fixture of the backend's conformance module (and its server
fixture), so ``broker.App`` meets the same servers, URLs and settings as the async suite.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

import broker
import tests.conformance.test_inmem as inmem_suite
import tests.conformance.test_jetstream as jetstream_suite
import tests.conformance.test_kafka as kafka_suite
import tests.conformance.test_pubsub as pubsub_suite
import tests.conformance.test_pulsar as pulsar_suite
import tests.conformance.test_rabbitmq as rabbitmq_suite
import tests.conformance.test_redis as redis_suite
import tests.conformance.test_servicebus as servicebus_suite
import tests.conformance.test_sqs as sqs_suite
from broker.driver.testing import Harness
from broker.driver.testing.app import AppConformanceSuite
from tests.integration.pulsar.server import PulsarTestServer

kafka_server = kafka_suite.kafka_server
nats_server = jetstream_suite.nats_server
emulator = pubsub_suite.emulator
pulsar = pulsar_suite.pulsar
fake = servicebus_suite.fake
rabbitmq_server = rabbitmq_suite.rabbitmq_server
redis_server = redis_suite.redis_server
moto_server_fake = sqs_suite.moto_server_fake


class TestInmemApp(AppConformanceSuite):
    harness = inmem_suite.TestInmemConformance.harness


class TestKafkaApp(AppConformanceSuite):
    harness = kafka_suite.TestKafkaConformance.harness


class TestJetStreamApp(AppConformanceSuite):
    harness = jetstream_suite.TestJetStreamConformance.harness


class TestPubsubApp(AppConformanceSuite):
    harness = pubsub_suite.TestPubsubUnorderedConformance.harness

    async def test_app_lifespan_exit_drains_with_nothing_lost(self, harness: Harness) -> None:
        """Skipped: not an App matter, and open (see the reason)."""
        pytest.skip(
            "emulator: it ignores a unary nack (modack 0) of messages a closed streaming pull held; the "
            "8 messages the drained receiver nacked were not redelivered within 40 s (nacks sent 0, 1 "
            "and 3 s after the stream closed, all answered OK); Pub/Sub's API takes a nack of any valid ack"
        )


class TestPulsarApp(AppConformanceSuite):
    @pytest.fixture
    async def harness(self, pulsar: PulsarTestServer) -> AsyncIterator[Harness]:
        """A shared subscription (the app layer does not depend on the subscription type)."""
        url = f"{pulsar.url}?nack_redelivery_delay=0.2&subscription_type=shared"
        async with broker.connect(url) as backend:
            yield pulsar_suite.PulsarHarness(backend, url=url)


class TestServiceBusApp(AppConformanceSuite):
    harness = servicebus_suite.TestServiceBusConformance.harness


class TestRabbitmqApp(AppConformanceSuite):
    harness = rabbitmq_suite.TestRabbitmqConformance.harness


class TestRedisApp(AppConformanceSuite):
    harness = redis_suite.TestRedisConformance.harness


class TestSqsApp(AppConformanceSuite):
    harness = sqs_suite.TestSqsSnsModeConformance.harness
