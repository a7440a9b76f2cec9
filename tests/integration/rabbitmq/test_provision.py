"""``provision`` on RabbitMQ, and estates someone else declared.

``create`` declares exchanges, queues and bindings; ``verify`` declares nothing and checks each one
passively (``ProvisioningError`` naming what is missing, at use and by ``ping()``); ``none``
declares and checks nothing and lets the broker's ``404`` surface as ``UnknownTopic``. A user
without the ``configure`` permission (``rabbitmqctl set_permissions app "^$" ".*" ".*"``) uses an
estate an administrator made with the raw SDK under ``verify`` and ``none``, and gets
``PermissionDenied`` under ``create``. Queues and exchanges of other kinds (a classic queue named
by its own name; direct, topic, headers and fanout exchanges) are consumed under ``none``.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import aio_pika
import aiormq.exceptions
import pytest
from aio_pika.abc import AbstractChannel, ExchangeType

import broker
from broker import Backend, OutboundMessage
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.errors import PermissionDenied, ProvisioningError, UnknownTopic

#: Bounds every step: a failure must be a typed error well within it, never a hang.
PATIENCE = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def app_user(rabbitmq_server: RabbitmqDevServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """The URL of user ``app``: may read and write everything, configure (declare) nothing."""
    definitions = {
        "users": [{"name": "app", "password": "app-pw", "tags": ""}],
        "permissions": [{"user": "app", "vhost": "/", "configure": "^$", "write": ".*", "read": ".*"}],
    }
    path: Path = tmp_path_factory.mktemp("rabbitmq-users") / "definitions.json"
    path.write_text(json.dumps(definitions))
    rabbitmq_server.ctl("import_definitions", str(path))
    yield f"rabbitmq://app:app-pw@{rabbitmq_server.host}:{rabbitmq_server.port}/"


@pytest.fixture
async def admin(rabbitmq_server: RabbitmqDevServer) -> AsyncIterator[AbstractChannel]:
    """A raw aio-pika channel of the administrator (guest: every permission)."""
    connection = await aio_pika.connect(host=rabbitmq_server.host, port=rabbitmq_server.port)
    async with connection:
        yield await connection.channel()


async def _exists(rabbitmq_server: RabbitmqDevServer, kind: str, name: str) -> bool:
    """Whether exchange or queue ``name`` exists (a passive declare on a channel of its own)."""
    connection = await aio_pika.connect(host=rabbitmq_server.host, port=rabbitmq_server.port)
    async with connection:
        channel = await connection.channel()
        try:
            if kind == "exchange":
                await channel.declare_exchange(name, passive=True)
            else:
                await channel.declare_queue(name, passive=True)
        except aiormq.exceptions.ChannelNotFoundEntity:
            return False
        return True


async def _take(backend: Backend, topic: str, subscription: str, count: int, **options: Any) -> list[bytes]:
    """``count`` messages of the subscription, acked, then one more wait that must find nothing."""
    out: list[bytes] = []
    async with backend.messages(topic, subscription, **options) as consumer:
        for _ in range(count):
            message = await consumer.next_message(timeout=PATIENCE)
            out.append(message.data)
            await message.ack()
        with pytest.raises(broker.errors.Timeout):
            await consumer.next_message(timeout=0.3)
    return out


async def test_verify_names_what_is_missing_and_declares_nothing(
    rabbitmq_server: RabbitmqDevServer, admin: AbstractChannel
) -> None:
    topic = _name("pv-orders")
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(f"{rabbitmq_server.url}?provision=verify") as backend:
            with pytest.raises(ProvisioningError) as published:
                await backend.publisher().topic(topic).publish(OutboundMessage(b"nowhere"))
            assert published.value.missing == (f"exchange {topic!r}",)
            with pytest.raises(ProvisioningError) as consumed:
                async with backend.messages(topic, "app") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            assert consumed.value.missing == (f"exchange {topic!r}", f"queue '{topic}.app'")
            with pytest.raises(ProvisioningError) as pinged:  # ping checks what was used since
                await backend.ping()
            assert set(pinged.value.missing) == {f"exchange {topic!r}", f"queue '{topic}.app'"}
            assert not await _exists(rabbitmq_server, "exchange", topic)  # trying declared nothing
            assert not await _exists(rabbitmq_server, "queue", f"{topic}.app")

            exchange = await admin.declare_exchange(topic, ExchangeType.FANOUT, durable=True)
            queue = await admin.declare_queue(f"{topic}.app", durable=True)
            await queue.bind(exchange)
            await backend.ping()
            await backend.publisher().topic(topic).publish(OutboundMessage(b"there"))
            assert await _take(backend, topic, "app", 1) == [b"there"]


async def test_none_surfaces_unknown_topic_and_declares_nothing(rabbitmq_server: RabbitmqDevServer) -> None:
    topic = _name("pn-orders")
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(f"{rabbitmq_server.url}?provision=none") as backend:
            with pytest.raises(UnknownTopic, match=topic):
                await backend.publisher().topic(topic).publish(OutboundMessage(b"nowhere"))
            with pytest.raises(UnknownTopic, match=topic):
                async with backend.messages(topic, "app") as consumer:
                    await consumer.next_message(timeout=PATIENCE)
            await backend.ping()  # checks nothing
    assert not await _exists(rabbitmq_server, "exchange", topic)
    assert not await _exists(rabbitmq_server, "queue", f"{topic}.app")


async def test_a_user_without_configure_permission_uses_an_estate_under_verify_and_none(
    app_user: str, admin: AbstractChannel
) -> None:
    topic = _name("estate")
    exchange = await admin.declare_exchange(topic, ExchangeType.FANOUT, durable=True)
    queue = await admin.declare_queue(f"{topic}.app", durable=True, arguments={"x-queue-type": "quorum"})
    await queue.bind(exchange)
    async with asyncio.timeout(4 * PATIENCE):
        for mode in ("verify", "none"):
            async with broker.connect(f"{app_user}?provision={mode}") as backend:
                await backend.ping()
                sent = [f"{mode}-{i}".encode() for i in range(3)]
                await backend.publisher().topic(topic).batch_publish(*map(OutboundMessage, sent))
                assert sorted(await _take(backend, topic, "app", 3)) == sorted(sent)


async def test_a_user_without_configure_permission_is_refused_under_create(
    app_user: str, admin: AbstractChannel
) -> None:
    topic = _name("estate")
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(app_user) as backend:
            with pytest.raises(PermissionDenied, match="ACCESS_REFUSED"):
                await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
            with pytest.raises(PermissionDenied, match="ACCESS_REFUSED"):
                async with backend.messages(topic, "app") as consumer:
                    await consumer.next_message(timeout=PATIENCE)


async def test_a_classic_queue_named_by_its_own_name(
    rabbitmq_server: RabbitmqDevServer, admin: AbstractChannel
) -> None:
    """``queue=`` consumes an existing classic queue as it is; ``delivery_attempt`` is 1, then 2
    on every redelivery (the ``redelivered`` flag: classic queues keep no count), never more."""
    name = _name("legacy")
    await admin.declare_queue(name, durable=True)  # classic: no x-queue-type
    for body in (b"one", b"two"):
        await admin.default_exchange.publish(aio_pika.Message(body), routing_key=name)
    async with asyncio.timeout(4 * PATIENCE):
        async with (
            broker.connect(f"{rabbitmq_server.url}?provision=none") as backend,
            backend.messages("anything", "app", queue=name) as consumer,
        ):
            first = await consumer.next_message(timeout=PATIENCE)
            assert (first.data, first.delivery_attempt) == (b"one", 1)
            await first.nack()
            seen: dict[bytes, list[int | None]] = {b"one": [1], b"two": []}
            for _ in range(3):
                message = await consumer.next_message(timeout=PATIENCE)
                seen[message.data].append(message.delivery_attempt)
                if message.data == b"one" and len(seen[b"one"]) == 2:
                    await message.nack()  # its third delivery still reads 2: a lower bound
                else:
                    await message.ack()
            assert seen == {b"one": [1, 2, 2], b"two": [1]}
    assert await _exists(rabbitmq_server, "queue", name)


@pytest.mark.parametrize(
    ("kind", "binding", "wanted", "unwanted"),
    [
        ("direct", {"binding_key": "eu"}, {"routing_key": "eu"}, {"routing_key": "us"}),
        ("topic", {"binding_key": "eu.*"}, {"routing_key": "eu.paris"}, {"routing_key": "us.austin"}),
        (
            "headers",
            {"binding_arguments": ("region=eu",)},
            {"headers": {"region": "eu"}},
            {"headers": {"region": "us"}},
        ),
        ("fanout", {"binding_key": "ignored"}, {}, None),
    ],
)
async def test_foreign_exchanges_of_every_type_with_a_binding_per_subscription(
    rabbitmq_server: RabbitmqDevServer,
    admin: AbstractChannel,
    kind: str,
    binding: dict[str, Any],
    wanted: dict[str, Any],
    unwanted: dict[str, Any] | None,
) -> None:
    """An exchange and a queue an administrator declared (the queue unbound); the subscription
    binds them with its own key or header match under ``provision=none`` and gets only the
    messages that match."""
    topic = _name(f"foreign-{kind}")
    exchange = await admin.declare_exchange(topic, ExchangeType(kind), durable=True)
    await admin.declare_queue(f"{topic}.eu", durable=True)
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(f"{rabbitmq_server.url}?provision=none") as backend:
            async with backend.messages(topic, "eu", **binding):
                pass  # entering binds the queue: from now on matching messages reach it
            for body, how in ((b"wanted", wanted), (b"unwanted", unwanted)):
                if how is not None:
                    await exchange.publish(
                        aio_pika.Message(body, headers=how.get("headers")), how.get("routing_key", "")
                    )
            assert await _take(backend, topic, "eu", 1, **binding) == [b"wanted"]


async def test_a_consumer_of_an_existing_queue_consumes_again_after_its_channel_is_reopened(
    rabbitmq_server: RabbitmqDevServer, admin: AbstractChannel
) -> None:
    """Under ``none`` (nothing declared) the queue is still one the robust channel restores: after
    a channel error the broker closed the channel on, the reopened channel consumes it again."""
    name = _name("reopened")
    await admin.declare_queue(name, durable=True)
    async with asyncio.timeout(4 * PATIENCE):
        async with (
            broker.connect(f"{rabbitmq_server.url}?provision=none") as backend,
            backend.messages("anything", "app", queue=name) as consumer,
        ):
            channel = consumer.driver._channel  # type: ignore[attr-defined]
            with pytest.raises(aiormq.exceptions.ChannelNotFoundEntity):  # the broker closes the channel
                await channel.declare_queue(_name("no-such-queue"), passive=True)
            await admin.default_exchange.publish(aio_pika.Message(b"after"), routing_key=name)
            message = await consumer.next_message(timeout=PATIENCE)
            assert message.data == b"after"
            await message.ack()
