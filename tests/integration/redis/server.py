"""The redis-server the Redis tests run against (shared by the integration and conformance tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker.backends.redis import RedisServerNotFound, factory
from broker.driver.devserver import ProcessServer


@contextmanager
def running_redis_server() -> Iterator[ProcessServer]:
    """A started ``redis-server`` on a free 127.0.0.1 port, stopped on exit (skips without one)."""
    try:
        server = factory.dev_server()
    except RedisServerNotFound as exc:
        pytest.skip(str(exc))
    with server:
        yield server
