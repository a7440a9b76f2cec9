"""The blocking API's conformance subset (:class:`broker.driver.testing.sync.SyncConformanceSuite`)
on every backend.

Each class borrows the ``harness`` fixture of the backend's conformance module (and its server
fixture), so the blocking API meets the same servers, URLs and settings as the async suite.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import AsyncIterator

import pytest

import broker
import broker.backends
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
from broker.driver.testing.sync import SyncConformanceSuite
from tests.integration.pulsar.server import PulsarTestServer

# Every backend module is imported here, in the main thread. Under pytest, whose assertion rewriting
# parses a module when it is first imported, a backend's lazy import on the blocking API's loop
# thread racing an import in the main thread trips CPython 3.11's AST recursion counter, which is
# not thread-safe ("SystemError: AST constructor recursion depth mismatch").
for _module in pkgutil.walk_packages(broker.backends.__path__, "broker.backends."):
    if ".processor" not in _module.name:
        importlib.import_module(_module.name)

kafka_server = kafka_suite.kafka_server
nats_server = jetstream_suite.nats_server
emulator = pubsub_suite.emulator
pulsar = pulsar_suite.pulsar
fake = servicebus_suite.fake
rabbitmq_server = rabbitmq_suite.rabbitmq_server
redis_server = redis_suite.redis_server
moto_server_fake = sqs_suite.moto_server_fake


class TestInmemSync(SyncConformanceSuite):
    harness = inmem_suite.TestInmemConformance.harness


class TestKafkaSync(SyncConformanceSuite):
    harness = kafka_suite.TestKafkaConformance.harness


class TestJetStreamSync(SyncConformanceSuite):
    harness = jetstream_suite.TestJetStreamConformance.harness


class TestPubsubSync(SyncConformanceSuite):
    harness = pubsub_suite.TestPubsubUnorderedConformance.harness


class TestPulsarSync(SyncConformanceSuite):
    @pytest.fixture
    async def harness(self, pulsar: PulsarTestServer) -> AsyncIterator[Harness]:
        """A shared subscription (the blocking layer does not depend on the subscription type)."""
        url = f"{pulsar.url}?nack_redelivery_delay=0.2&subscription_type=shared"
        async with broker.connect(url) as backend:
            yield pulsar_suite.PulsarHarness(backend, url=url)


class TestServiceBusSync(SyncConformanceSuite):
    harness = servicebus_suite.TestServiceBusConformance.harness


class TestRabbitmqSync(SyncConformanceSuite):
    harness = rabbitmq_suite.TestRabbitmqConformance.harness


class TestRedisSync(SyncConformanceSuite):
    harness = redis_suite.TestRedisConformance.harness


class TestSqsSync(SyncConformanceSuite):
    harness = sqs_suite.TestSqsSnsModeConformance.harness
