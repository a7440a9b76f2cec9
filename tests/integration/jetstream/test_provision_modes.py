"""``provision`` on JetStream, and estates someone else made.

``create`` makes streams and durable consumers; ``verify`` makes nothing and names a missing stream
or consumer in a ``ProvisioningError`` (read-only API requests, at use and by ``ping()``); ``none``
makes and asks nothing beforehand and lets the server's answer surface as ``UnknownTopic``. A user
whose permissions deny creating streams and consumers (``$JS.API.STREAM.CREATE.>``,
``$JS.API.CONSUMER.CREATE.>``, ...) consumes a stream and durable consumer made with raw nats-py,
by name and with a wildcard subject, under ``verify`` and ``none``; under ``create`` the denial is
``PermissionDenied`` at once, not a timeout.
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import nats
import pytest
from nats.js import api
from nats.js.errors import NotFoundError

import broker
from broker import Backend, OutboundMessage
from broker.backends.jetstream.devserver import find_nats_server
from broker.driver.devserver import ProcessServer, free_port
from broker.errors import PermissionDenied, ProvisioningError, UnknownTopic

#: Bounds every step: a failure must be a typed error well within it, never a hang.
PATIENCE = 10.0

_CONFIG = """
listen: "127.0.0.1:{port}"
jetstream {{ store_dir: "{store}" }}
authorization {{
  users = [
    {{user: admin, password: admin-pw}}
    # may publish, pull and ack, never create, change or delete a stream or consumer
    {{user: app, password: app-pw,
     permissions: {{publish: {{deny: [
       "$JS.API.STREAM.CREATE.>", "$JS.API.STREAM.UPDATE.>", "$JS.API.STREAM.DELETE.>",
       "$JS.API.CONSUMER.CREATE.>", "$JS.API.CONSUMER.DURABLE.CREATE.>", "$JS.API.CONSUMER.DELETE.>"
     ]}}}}}}
  ]
}}
"""


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    """A nats-server with JetStream and the users ``admin`` (everything) and ``app`` (no creating)."""
    directory: Path = tmp_path_factory.mktemp("nats-estate")
    port = free_port()
    config = directory / "nats.conf"
    config.write_text(_CONFIG.format(port=port, store=directory / "js"))
    process = ProcessServer(
        [find_nats_server(), "-c", str(config)],
        url=f"nats://127.0.0.1:{port}",
        host="127.0.0.1",
        port=port,
        workdir=str(directory),
    )
    with process.start():
        yield process


def _url(server: ProcessServer, user: str, provision: str, more: str = "") -> str:
    return f"nats://{user}:{user}-pw@127.0.0.1:{server.port}?provision={provision}&pull_expires=0.5{more}"


def _name(prefix: str) -> str:
    return f"{prefix}_{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def admin(server: ProcessServer) -> AsyncIterator[nats.js.JetStreamManager]:
    """Raw nats-py JetStream management as ``admin``."""
    client = await nats.connect(f"nats://admin:admin-pw@127.0.0.1:{server.port}")
    try:
        yield client.jsm()
    finally:
        await client.close()


async def _stream_exists(jsm: nats.js.JetStreamManager, name: str) -> bool:
    try:
        await jsm.stream_info(name)
    except NotFoundError:
        return False
    return True


async def _take(backend: Backend, topic: str, subscription: str, count: int) -> list[bytes]:
    """``count`` messages of the durable consumer, acked, then a short wait that finds nothing more."""
    out: list[bytes] = []
    async with backend.messages(topic, subscription) as consumer:
        for _ in range(count):
            message = await consumer.next_message(timeout=PATIENCE)
            out.append(message.data)
            await message.ack()
        with pytest.raises(broker.errors.Timeout):
            await consumer.next_message(timeout=0.3)
    return out


async def test_verify_names_the_missing_stream_and_consumer_and_makes_nothing(
    server: ProcessServer, admin: nats.js.JetStreamManager
) -> None:
    stream, subject = _name("PV"), _name("pv")
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(_url(server, "admin", "verify")) as backend:
            with pytest.raises(ProvisioningError) as published:
                await backend.publisher().topic(subject).publish(OutboundMessage(b"nowhere"))
            assert published.value.missing == (f"a JetStream stream storing subject {subject!r}",)
            with pytest.raises(ProvisioningError) as consumed:
                async with backend.messages(subject, "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            assert consumed.value.missing == (f"a JetStream stream storing subject {subject!r}",)
        named = _url(
            server, "admin", "verify", f"&stream={stream}&durable=worker&dead_letter_subject={subject}.dlq"
        )
        async with broker.connect(named) as backend:
            with pytest.raises(ProvisioningError) as pinged:
                await backend.ping()
            assert pinged.value.missing == (
                f"JetStream stream {stream!r}",
                f"a JetStream stream storing subject '{subject}.dlq'",
            )
            assert not await _stream_exists(admin, stream)  # trying made nothing
            await admin.add_stream(name=stream, subjects=[f"{subject}.>"])
            with pytest.raises(ProvisioningError) as no_consumer:
                await backend.ping()
            assert no_consumer.value.missing == (f"consumer 'worker' of stream {stream!r}",)
            with pytest.raises(ProvisioningError) as consumed:
                async with backend.messages(f"{subject}.eu", "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            assert consumed.value.missing == (f"consumer 'worker' of stream {stream!r}",)
            assert (await admin.stream_info(stream)).state.consumer_count == 0
            await admin.add_consumer(stream, durable_name="worker", ack_policy=api.AckPolicy.EXPLICIT)
            await backend.ping()
            await backend.publisher().topic(f"{subject}.eu").publish(OutboundMessage(b"there"))
            assert await _take(backend, f"{subject}.eu", "worker", 1) == [b"there"]


async def test_none_makes_nothing_and_surfaces_unknown_topic(
    server: ProcessServer, admin: nats.js.JetStreamManager
) -> None:
    stream, subject = _name("PN"), _name("pn")
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(_url(server, "admin", "none")) as backend:
            await backend.ping()
            with pytest.raises(UnknownTopic):
                await backend.publisher().topic(subject).publish(OutboundMessage(b"nowhere"))
            with pytest.raises(UnknownTopic):
                async with backend.messages(subject, "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
        async with broker.connect(_url(server, "admin", "none", f"&stream={stream}")) as backend:
            with pytest.raises(UnknownTopic):
                async with backend.messages(subject, "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            assert not await _stream_exists(admin, stream)
            await admin.add_stream(name=stream, subjects=[subject])
            with pytest.raises(UnknownTopic, match="worker"):  # the durable consumer is missing
                async with backend.messages(subject, "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            assert (await admin.stream_info(stream)).state.consumer_count == 0


async def test_a_user_who_may_not_create_consumes_an_estate_under_verify_and_none(
    server: ProcessServer, admin: nats.js.JetStreamManager
) -> None:
    """A stream and a durable consumer made with raw nats-py, consumed by name with a wildcard
    subject: through the stream found by subject, and through the stream named in the settings."""
    stream, prefix = _name("ESTATE"), _name("estate")
    await admin.add_stream(name=stream, subjects=[f"{prefix}.>"])
    await admin.add_consumer(
        stream, durable_name="worker", ack_policy=api.AckPolicy.EXPLICIT, filter_subject=f"{prefix}.>"
    )
    async with asyncio.timeout(4 * PATIENCE):
        for mode, more in (
            ("verify", ""),
            ("none", ""),
            ("verify", f"&stream={stream}"),
            ("none", f"&stream={stream}"),
        ):
            async with broker.connect(_url(server, "app", mode, more)) as backend:
                await backend.ping()
                sent = [f"{mode}{more}-{region}".encode() for region in ("eu", "us")]
                publisher = backend.publisher()
                for body, region in zip(sent, ("eu", "us"), strict=True):
                    await publisher.topic(f"{prefix}.{region}").publish(OutboundMessage(body))
                assert sorted(await _take(backend, f"{prefix}.>", "worker", 2)) == sorted(sent)
    info = await admin.stream_info(stream)
    assert (info.state.messages, info.state.consumer_count) == (8, 1)


async def test_a_user_who_may_not_create_gets_permission_denied_under_create(
    server: ProcessServer, admin: nats.js.JetStreamManager
) -> None:
    stream, prefix = _name("LOCKED"), _name("locked")
    await admin.add_stream(name=stream, subjects=[f"{prefix}.>"])
    async with asyncio.timeout(PATIENCE):  # well under the 5 s request_timeout twice over
        async with broker.connect(_url(server, "app", "create")) as backend:
            with pytest.raises(PermissionDenied, match=r"\$js\.api\.stream\.create"):
                await backend.publisher().topic(_name("fresh")).publish(OutboundMessage(b"x"))
            with pytest.raises(PermissionDenied, match=r"\$js\.api\.consumer"):
                async with backend.messages(f"{prefix}.eu", "worker") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
    assert (await admin.stream_info(stream)).state.consumer_count == 0
