"""Publishing to ``direct`` and ``headers`` exchanges, and consuming them per subscription.

``exchange_type`` (every topic) and ``exchange_types`` (``name=type`` per topic) say which kind
of exchange a topic is: ``fanout``, ``topic``, ``direct`` or ``headers``. Under ``provision=create``
an exchange someone else declared with that type is declared again alike (no
``PRECONDITION_FAILED``), the message key is the routing key on ``topic`` and ``direct``
exchanges, and attributes are the headers a ``headers`` exchange matches. Each subscription picks
its messages with ``binding_key`` or ``binding_arguments``; a subscription of a ``direct`` exchange
without a ``binding_key`` under ``create`` is a ``ConfigError`` (``#`` would match no message).
"""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator

import aio_pika
import pytest
from aio_pika.abc import AbstractChannel, ExchangeType

import broker
from broker import Backend, OutboundMessage
from broker.backends.rabbitmq import RabbitmqDevServer
from broker.errors import ConfigError, Timeout

#: Bounds every step: a failure must be a typed error well within it, never a hang.
PATIENCE = 10.0


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture
async def admin(rabbitmq_server: RabbitmqDevServer) -> AsyncIterator[AbstractChannel]:
    """A raw aio-pika channel of the administrator (guest: every permission)."""
    connection = await aio_pika.connect(host=rabbitmq_server.host, port=rabbitmq_server.port)
    async with connection:
        yield await connection.channel()


async def _drain(backend: Backend, topic: str, subscription: str, **options: object) -> list[bytes]:
    """Every message the subscription holds, acked, sorted (a short wait ends it)."""
    out: list[bytes] = []
    async with backend.messages(topic, subscription, **options) as consumer:
        while True:
            try:
                message = await consumer.next_message(timeout=0.5)
            except Timeout:
                return sorted(out)
            out.append(message.data)
            await message.ack()


async def test_publishing_to_existing_direct_and_headers_exchanges_under_create(
    rabbitmq_server: RabbitmqDevServer, admin: AbstractChannel
) -> None:
    """An administrator's ``direct`` and ``headers`` exchanges, named per topic in
    ``exchange_types``: publishing declares them alike, each subscription gets only what its
    binding key or header match selects, and nothing is lost."""
    direct, headers = _name("ex-direct"), _name("ex-headers")
    await admin.declare_exchange(direct, ExchangeType.DIRECT, durable=True)
    await admin.declare_exchange(headers, ExchangeType.HEADERS, durable=True)
    url = f"{rabbitmq_server.url}?exchange_types={direct}=direct,{headers}=headers"
    async with asyncio.timeout(4 * PATIENCE), broker.connect(url) as backend:
        for sub, key in (("eu", "eu"), ("us", "us")):
            async with backend.messages(direct, sub, binding_key=key):
                pass  # declares and binds the subscription's queue
        for sub, match in (("eu", ("region=eu",)), ("any", ("x-match=any", "region=eu", "region2=us"))):
            async with backend.messages(headers, sub, binding_arguments=match):
                pass
        topic = backend.publisher().topic(direct)
        await topic.batch_publish(
            *(OutboundMessage(f"d{i}".encode(), key=("eu", "us", "other")[i % 3]) for i in range(9))
        )
        await (
            backend.publisher()
            .topic(headers)
            .batch_publish(
                OutboundMessage(b"h-eu", attributes={"region": "eu"}),
                OutboundMessage(b"h-us", attributes={"region": "us"}),
                OutboundMessage(b"h-none"),
            )
        )
        assert await _drain(backend, direct, "eu", binding_key="eu") == [b"d0", b"d3", b"d6"]
        assert await _drain(backend, direct, "us", binding_key="us") == [b"d1", b"d4", b"d7"]
        assert await _drain(backend, headers, "eu", binding_arguments=("region=eu",)) == [b"h-eu"]
        # x-match=any with region=eu or region2=us: only h-eu has a matching header
        any_match = ("x-match=any", "region=eu", "region2=us")
        assert await _drain(backend, headers, "any", binding_arguments=any_match) == [b"h-eu"]


async def test_exchange_type_direct_for_every_topic_and_a_subscription_without_a_key(
    rabbitmq_server: RabbitmqDevServer, admin: AbstractChannel
) -> None:
    """``exchange_type=direct`` declares direct exchanges; a subscription that names no
    ``binding_key`` is refused under ``create`` rather than bound with ``#``, which matches nothing.
    An existing exchange of another type than the one configured is a ``ConfigError`` naming it."""
    topic, theirs = _name("all-direct"), _name("theirs-headers")
    await admin.declare_exchange(theirs, ExchangeType.HEADERS, durable=True)
    async with asyncio.timeout(4 * PATIENCE):
        async with broker.connect(f"{rabbitmq_server.url}?exchange_type=direct") as backend:
            with pytest.raises(ConfigError, match=f"PRECONDITION_FAILED.*{theirs}"):
                await backend.publisher().topic(theirs).publish(OutboundMessage(b"wrong type"))
        async with broker.connect(f"{rabbitmq_server.url}?exchange_type=direct") as backend:
            with pytest.raises(ConfigError, match="binding_key"):
                async with backend.messages(topic, "nokey"):
                    pass
            async with backend.messages(topic, "k", binding_key="k"):
                pass
            await backend.publisher().topic(topic).publish(OutboundMessage(b"for-k", key="k"))
            assert await _drain(backend, topic, "k", binding_key="k") == [b"for-k"]
