"""A Service Bus estate made by others with the raw azure-servicebus SDK, used under ``provision=none``.

The administrator creates a queue, a topic and its subscription with the SDK's
``ServiceBusAdministrationClient`` (against the FAKE's HTTP management API), another service sends
with the SDK's sender; polybroker, creating nothing, consumes the queue and the subscription by
their own names and publishes to the topic. Nothing is lost: every message sent arrives once.
"""

from __future__ import annotations

import asyncio
import uuid
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from azure.core.pipeline.transport import RequestsTransport
from azure.servicebus import ServiceBusMessage
from azure.servicebus.aio import ServiceBusClient
from azure.servicebus.management import ServiceBusAdministrationClient

import broker
from broker import OutboundMessage
from broker.errors import Timeout
from tests.servicebus_fake import FakeServiceBus

PATIENCE = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


class _ToTheFake(RequestsTransport):  # type: ignore[misc]
    """Sends the administration client's HTTPS requests to the fake's plain-HTTP endpoint."""

    def __init__(self, endpoint: str) -> None:
        super().__init__()
        self._base = urlsplit(endpoint)

    def send(self, request: Any, **kwargs: Any) -> Any:
        parts = urlsplit(request.url)
        request.url = urlunsplit((self._base.scheme, self._base.netloc, parts.path, parts.query, ""))
        return super().send(request, **kwargs)


def _administrator_makes(fake: FakeServiceBus, queue: str, topic: str, subscription: str) -> None:
    admin = ServiceBusAdministrationClient.from_connection_string(
        fake.connection_string, transport=_ToTheFake(fake.management_endpoint)
    )
    with admin:
        admin.create_queue(queue)
        admin.create_topic(topic)
        admin.create_subscription(topic, subscription)


async def test_provision_none_consumes_a_queue_and_a_subscription_the_raw_sdk_made(
    fake_servicebus: FakeServiceBus,
) -> None:
    queue, topic, subscription = _name("q"), _name("t"), _name("s")
    await asyncio.to_thread(_administrator_makes, fake_servicebus, queue, topic, subscription)
    async with ServiceBusClient.from_connection_string(fake_servicebus.connection_string) as client:
        async with client.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(f"q{i}".encode()) for i in range(3)])
    settings = {**fake_servicebus.settings, "provision": "none"}
    async with asyncio.timeout(4 * PATIENCE), broker.connect(settings) as backend:
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(*(OutboundMessage(f"t{i}".encode()) for i in range(3)))
        )
        for entity, sub, expected in ((queue, "", "q"), (topic, subscription, "t")):
            got = []
            async with backend.messages(entity, sub) as consumer:
                for _ in range(3):
                    message = await consumer.next_message(timeout=PATIENCE)
                    got.append(message.data)
                    await message.ack()
                try:
                    extra = await consumer.next_message(timeout=0.3)
                except Timeout:
                    extra = None
            assert extra is None, f"{entity}: one more message than was sent: {extra!r}"
            assert sorted(got) == [f"{expected}{i}".encode() for i in range(3)]
    namespace = fake_servicebus.namespace
    assert set(namespace.topics[topic].subscriptions) == {subscription}  # nothing made beside them
