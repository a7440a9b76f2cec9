"""The rabbitmq-server the RabbitMQ tests run against (shared by the integration and conformance tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker.backends.rabbitmq import RabbitmqDevServer, RabbitmqServerNotFound, factory


@contextmanager
def running_rabbitmq_server() -> Iterator[RabbitmqDevServer]:
    """A started ``rabbitmq-server`` on free 127.0.0.1 ports, stopped on exit (skips without one)."""
    try:
        server = factory.dev_server()
    except RabbitmqServerNotFound as exc:
        pytest.skip(str(exc))
    with server:
        yield server
