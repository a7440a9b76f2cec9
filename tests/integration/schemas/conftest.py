"""Servers of the schema integration tests: one of each for the module that needs it."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.driver.devserver import ProcessServer
from tests.integration.jetstream.server import running_nats_server
from tests.integration.kafka.support import tansu
from tests.integration.rabbitmq.server import running_rabbitmq_server


@pytest.fixture(scope="module")
def tansu_server() -> Iterator[ProcessServer]:
    with tansu() as server:
        yield server


@pytest.fixture(scope="module")
def nats_server() -> Iterator[ProcessServer]:
    with running_nats_server() as server:
        yield server


@pytest.fixture(scope="module")
def rabbitmq_server() -> Iterator[object]:
    with running_rabbitmq_server() as server:
        yield server
