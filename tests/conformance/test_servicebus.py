"""The conformance suite on the Service Bus backend: the real azure-servicebus SDK against the FAKE server.

The fake (``tests.servicebus_fake``) speaks the SDK's wire protocol and the management API's
entity requests; it is not Azure. The harness is the base one: the backend creates the queues,
topics and subscriptions it needs (``create_missing``), and takes the portable option names.
"""

from __future__ import annotations

import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

import broker
from broker.driver.devserver import ProcessServer, free_port
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.servicebus_fake import FakeServiceBus


@pytest.fixture(scope="module")
def fake() -> Iterator[FakeServiceBus]:
    with FakeServiceBus(auto_create=False) as server:
        yield server


@contextmanager
def own_fake() -> Iterator[KillableServer]:
    """The FAKE server in a process of its own (entities made on first use), which a test may kill."""
    port = free_port()
    command = [sys.executable, "-m", "tests.servicebus_fake", "--port", str(port)]
    root = str(Path(__file__).resolve().parents[2])
    with ProcessServer(
        command,
        url=f"fake-servicebus://127.0.0.1:{port}",
        host="127.0.0.1",
        port=port,
        env={"PYTHONPATH": root},
    ) as server:
        connection_string = (
            f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=fake;"
            "SharedAccessKey=ZmFrZS1rZXk=;UseDevelopmentEmulator=true"
        )
        yield killable(server, {"url": connection_string, "create_missing": "false", "retry_total": "0"})


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
                own_server=own_fake,
                dead_server_bound=15.0,
            )
