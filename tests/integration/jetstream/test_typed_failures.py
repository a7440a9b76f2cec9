"""Refusals a caller can act on, from a real nats-server with authorization: typed, with ``retryable``.

Wrong credentials -> ``AuthenticationFailed`` (not retryable), not a bare ``ConnectionFailed``
after the connect timeout.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import pytest

import broker
from broker import OutboundMessage
from broker.backends.jetstream.devserver import nats_dev_server
from broker.driver.devserver import ProcessServer
from broker.errors import AuthenticationFailed, PermissionDenied


@pytest.fixture(scope="module")
def secured_nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    """nats-server with JetStream, a user ``admin`` (password ``s3cret``), a user ``reader`` who
    may not publish to ``orders.>`` and a user ``puller`` who may not send pull requests."""
    config = Path(tmp_path_factory.mktemp("nats")) / "auth.conf"
    config.write_text(
        """
authorization {
  users = [
    {user: admin, password: s3cret}
    {user: reader, password: r3ad, permissions: {publish: {deny: ["orders.>"]}}}
    {user: puller, password: pu11, permissions: {publish: {deny: ["$JS.API.CONSUMER.MSG.NEXT.>"]}}}
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


async def test_a_denied_publish_is_permission_denied_at_once(secured_nats: ProcessServer) -> None:
    # The server refuses the publish only with an asynchronous -ERR, never a PubAck: without
    # reading that error the publish would wait for its whole publish_timeout and say Timeout.
    url = secured_nats.url.replace("nats://", "nats://reader:r3ad@")
    async with broker.connect(f"{url}?publish_timeout=60") as backend:
        topic = backend.publisher().topic("orders.eu")
        async with asyncio.timeout(20):
            with pytest.raises(PermissionDenied, match=r"orders\.eu") as caught:
                await topic.publish(OutboundMessage(b"x"))
            assert caught.value.retryable is False
            with pytest.raises(PermissionDenied):
                await topic.batch_publish(*(OutboundMessage(b"%d" % i) for i in range(3)))
        allowed = backend.publisher().topic("audit.eu")
        await allowed.publish(OutboundMessage(b"still fine"))  # the connection is unharmed


async def test_a_denied_pull_is_permission_denied_not_an_endless_wait(secured_nats: ProcessServer) -> None:
    # Stream and consumer are made (the JetStream API is allowed); the pull requests are refused,
    # again only with an asynchronous -ERR: the consumer must say so instead of waiting for messages.
    url = secured_nats.url.replace("nats://", "nats://puller:pu11@")
    async with broker.connect(url) as backend:
        async with backend.messages("jobs.eu", "workers") as consumer:
            async with asyncio.timeout(20):
                with pytest.raises(PermissionDenied, match=r"(?i)consumer\.msg\.next"):
                    await consumer.next_message(timeout=60)
