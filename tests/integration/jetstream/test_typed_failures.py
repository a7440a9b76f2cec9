"""Refusals a caller can act on, from a real nats-server with authorization: typed, with ``retryable``.

Wrong credentials -> ``AuthenticationFailed`` (not retryable), not a bare ``ConnectionFailed``
after the connect timeout.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

import broker
from backends.jetstream.devserver import nats_dev_server
from broker import OutboundMessage
from broker.devserver import ProcessServer
from broker.errors import AuthenticationFailed


@pytest.fixture(scope="module")
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    """nats-server with JetStream and one user, ``admin``, with the password ``s3cret``."""
    config = Path(tmp_path_factory.mktemp("nats")) / "auth.conf"
    config.write_text(
        """
authorization {
  users = [
    {user: admin, password: s3cret}
  ]
}
"""
    )
    server = nats_dev_server()
    server.command += ["-c", str(config)]
    with server:
        yield server


async def test_wrong_password_is_authentication_failed(secured_nats: ProcessServer) -> None:
    url = secured_nats.url.replace("nats://", "nats://admin:wrong@")
    async with broker.connect(f"{url}?max_reconnect_attempts=0&connect_timeout=3") as backend:
        with pytest.raises(AuthenticationFailed) as caught:
            await backend.publisher().topic("orders.eu").publish(OutboundMessage(b"x"))
    assert caught.value.retryable is False
