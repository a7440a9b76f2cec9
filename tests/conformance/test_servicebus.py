"""The conformance suite on the Service Bus backend: the real azure-servicebus SDK against the FAKE server.

The fake (``tests.servicebus_fake``) speaks the SDK's wire protocol; it is not Azure. Topics are
published to and read through subscriptions created before publishing (``prepare``); the suite's
ack deadline is the subscription's lock duration, which the harness sets on the fake.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from typing import Any

import pytest

import broker
from broker.interfaces import MessageIterator
from broker.testing import ConformanceSuite, Harness
from tests.servicebus_fake import FakeServiceBus


class ServiceBusHarness(Harness):
    """Creates topics and subscriptions on the fake; maps ``ack_deadline`` to the lock duration."""

    def __init__(self, backend: broker.Backend, fake: FakeServiceBus, **overrides: object) -> None:
        super().__init__(backend, **overrides)
        self.fake = fake

    async def prepare(self, topic: str, subscriptions: Sequence[str] = ()) -> None:
        self.fake.create_topic(topic, list(subscriptions))

    def dead_letter_options(
        self, max_attempts: int, topic: str, *, source_topic: str, source_subscription: str
    ) -> dict[str, Any]:
        # Service Bus makes both entity properties: the subscription just prepared gets
        # MaxDeliveryCount and ForwardDeadLetteredMessagesTo; the consumer needs no options.
        # The backend creates no entities yet (issue 14, open), so the dead-letter topic is made here.
        self.fake.create_topic(topic, ["inspect"])
        self.fake.update(
            f"{source_topic}/Subscriptions/{source_subscription}",
            max_delivery_count=max_attempts,
            forward_dead_lettered_messages_to=topic,
        )
        return {}

    def messages(
        self, topic: str, subscription: str, *, ack_deadline: float | None = None
    ) -> MessageIterator:
        if ack_deadline is not None:
            self.fake.update(f"{topic}/Subscriptions/{subscription}", lock_duration=ack_deadline)
        return self.backend.messages(topic, subscription)


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServiceBus]:
    with FakeServiceBus(auto_create=False) as server:
        yield server


#: Open (issue 14, finding 4's class on Service Bus): the backend creates no queue, topic or
#: subscription on first use (that needs the management API, which the test server lacks), so every
#: test that opens a consumer on an entity nobody made fails with UnknownTopic. Strict: each fails.
_NEEDS_ENTITY_CREATION = frozenset(
    {
        "test_consumer_opened_before_its_topic_exists",
        "test_nack_redelivers_on_a_topic_created_after_the_consumer",
        "test_open_close_publish_reopen",
        "test_publish_before_any_subscription",
        "test_receiver_with_a_handler_that_always_fails",
        "test_backend_close_while_consumers_are_busy",
        "test_crashed_consumer_process_loses_nothing",
    }
)


class TestServiceBusConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, fake: FakeServiceBus, request: pytest.FixtureRequest) -> AsyncIterator[Harness]:
        if request.node.originalname in _NEEDS_ENTITY_CREATION:
            request.applymarker(
                pytest.mark.xfail(
                    raises=broker.errors.UnknownTopic,
                    strict=True,
                    reason="open: the Service Bus backend does not create missing entities yet",
                )
            )
        async with broker.connect(fake.connection_string) as backend:
            yield ServiceBusHarness(
                backend,
                fake,
                url=fake.connection_string,
                short_ack_deadline=1.0,
                patience=10.0,
                bad_urls=[
                    "servicebus://ns?shared_access_key_name=k&shared_access_key=v&batch_size=5001",
                    "servicebus://ns?shared_access_key_name=k&shared_access_key=v&prefetch=-1",
                    "servicebus://ns",
                ],
            )
