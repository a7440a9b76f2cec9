"""The conformance suite on the Service Bus backend: the real azure-servicebus SDK against the FAKE server.

The fake (``tests.servicebus_fake``) speaks the SDK's wire protocol and the management API's
entity requests; it is not Azure. The harness is the base one: the backend creates the queues,
topics and subscriptions it needs (``create_missing``), and takes the portable option names.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest

import broker
from broker.testing import ConformanceSuite, Harness
from tests.servicebus_fake import FakeServiceBus


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServiceBus]:
    with FakeServiceBus(auto_create=False) as server:
        yield server


class TestServiceBusConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, fake: FakeServiceBus) -> AsyncIterator[Harness]:
        async with broker.connect(fake.settings) as backend:
            yield Harness(
                backend,
                url=fake.settings,
                short_ack_deadline=1.0,
                patience=10.0,
                bad_urls=[
                    "servicebus://ns?shared_access_key_name=k&shared_access_key=v&batch_size=5001",
                    "servicebus://ns?shared_access_key_name=k&shared_access_key=v&prefetch=-1",
                    "servicebus://ns",
                ],
            )
