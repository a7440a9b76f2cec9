"""A FAKE Service Bus (tests.servicebus_fake) on a free 127.0.0.1 port, shared by the session's tests."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.servicebus_fake import FakeServiceBus


@pytest.fixture(scope="session")
def fake_servicebus() -> Iterator[FakeServiceBus]:
    """The running fake; tests create their own uniquely named entities on it."""
    with FakeServiceBus(auto_create=False) as server:
        yield server
