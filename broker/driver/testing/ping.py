"""Conformance tests of ``Backend.ping``: a reachable broker answers, a wrong host fails fast and typed."""

from __future__ import annotations

import re
import socket
from collections.abc import Mapping
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker.connect import connect
from broker.driver.clock import clock
from broker.driver.testing.harness import Harness
from broker.errors import AuthenticationFailed, ConnectionFailed

__all__ = ["PingSuite", "unreachable"]

#: A loopback address with a port in a URL, a connection string or a mapping value.
_LOOPBACK = re.compile(r"(127\.0\.0\.1|localhost|\[::1\]):\d+")


def _closed_port() -> int:
    """A loopback port nothing listens on (bound, then released: connecting is refused at once)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def unreachable(url: str | Mapping[str, Any]) -> str | dict[str, Any] | None:
    """``url`` with every loopback ``host:port`` in it moved to a port nothing listens on.

    None when ``url`` names no loopback address (a backend without a server, such as inmem).
    """
    port = _closed_port()
    found = False

    def move(value: Any) -> Any:
        nonlocal found
        if isinstance(value, str):
            moved, count = _LOOPBACK.subn(f"127.0.0.1:{port}", value)
            found = found or count > 0
            return moved
        if isinstance(value, list | tuple):
            return type(value)(move(v) for v in value)
        return value

    if isinstance(url, str):
        result: str | dict[str, Any] = move(url)
    else:
        result = {key: move(value) for key, value in url.items()}
    return result if found else None


class PingSuite:
    """``await backend.ping(timeout=...)`` on every backend (mixed into the conformance suite)."""

    async def test_ping_answers_and_a_wrong_host_fails_fast(self, harness: Harness) -> None:
        """The connected backend answers a ping; the same settings with a port nothing listens on
        raise ``ConnectionFailed`` (not an authentication error) within the ping's timeout."""
        await harness.backend.ping(timeout=harness.patience)
        if harness.url is None:
            return
        wrong = unreachable(harness.url)
        if wrong is None:  # no server to be wrong about (inmem): ping just answers
            return
        timeout = 5.0
        started = clock.monotonic()
        async with connect(wrong) as backend:
            with pytest.raises(ConnectionFailed) as caught:
                await backend.ping(timeout=timeout)
        elapsed = clock.monotonic() - started
        assert not isinstance(caught.value, AuthenticationFailed), repr(caught.value)
        assert caught.value.retryable, repr(caught.value)
        assert elapsed < timeout + 5, f"a refused ping took {elapsed:.1f}s: {caught.value!r}"
