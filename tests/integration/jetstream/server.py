"""The nats-server the JetStream tests run against (shared by the integration and conformance tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from broker.backends.jetstream.registration import factory
from broker.driver.devserver import ProcessServer


@contextmanager
def running_nats_server(store_dir: str | None = None) -> Iterator[ProcessServer]:
    """A started ``nats-server -js`` on a free 127.0.0.1 port, stopped on exit."""
    with factory.dev_server(store_dir=store_dir) as server:
        yield server
