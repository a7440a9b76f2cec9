"""Streams and consumers: made when missing, checked when present, left alone on locked-down servers."""

from __future__ import annotations

import pytest
from nats.js import api

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.provisioning import stream_name_for, subject_covers
from broker.driver.devserver import ProcessServer
from broker.driver.testing.harness import collect
from broker.errors import ConfigError, UnknownTopic
from tests.integration.jetstream.helpers import unique


def test_subject_coverage_and_stream_names() -> None:
    assert subject_covers("orders.>", "orders.eu.de")
    assert subject_covers("orders.*", "orders.eu")
    assert subject_covers("orders.*", "orders.*")
    assert not subject_covers("orders.*", "orders.>")
    assert not subject_covers("orders.*", "orders.eu.de")
    assert not subject_covers("orders.eu", "orders.*")
    assert subject_covers(">", "a")
    assert stream_name_for("orders.eu") == "orders_eu"
    assert stream_name_for("orders.*") == "orders_STAR"


async def test_a_named_stream_collects_several_topics(nats_server: ProcessServer) -> None:
    stream = unique("S").replace("-", "_")
    first, second = unique("one"), unique("two")
    async with broker.connect(f"{nats_server.url}/{stream}") as backend:
        assert isinstance(backend, JetStreamBackend)
        await backend.publisher().topic(first).publish(OutboundMessage(b"1"))
        await backend.publisher().topic(second).publish(OutboundMessage(b"2"))
        jsm = backend.connection.jsm
        assert jsm is not None
        info = await jsm.stream_info(stream)
        assert sorted(info.config.subjects or []) == sorted([first, second])
        async with backend.messages(second, "reader") as consumer:
            (message,) = await collect(consumer, 1, 5)
        assert message.data == b"2"  # the consumer is filtered on its topic


async def test_wildcard_consumer_over_an_existing_stream(backend: JetStreamBackend) -> None:
    base = unique("w")
    jsm = backend.connection.jsm
    await backend.connection.client()
    jsm = backend.connection.jsm
    assert jsm is not None
    await jsm.add_stream(name=base.replace("-", "_"), subjects=[f"{base}.>"])
    publisher = backend.publisher()
    await publisher.topic(f"{base}.a").publish(OutboundMessage(b"a"))
    await publisher.topic(f"{base}.b").publish(OutboundMessage(b"b"))
    async with backend.messages(f"{base}.*", "all") as consumer:
        got = await collect(consumer, 2, 5)
    assert sorted(m.data for m in got) == [b"a", b"b"]


async def test_locked_down_server_settings_create_nothing(
    backend: JetStreamBackend, nats_server: ProcessServer
) -> None:
    topic = unique("locked")
    await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))  # an admin made the stream
    url = f"{nats_server.url}?create_streams=false&create_consumers=false"
    async with broker.connect(url) as locked:
        with pytest.raises(UnknownTopic):
            await locked.messages(topic, "nobody-made-me").next_message(timeout=1)
        with pytest.raises(UnknownTopic):
            await locked.messages(unique("nostream"), "c").next_message(timeout=1)
        # An existing consumer is used as it is, whatever its settings.
        async with backend.messages(topic, "admin-made", ack_wait=7):
            pass
        async with backend.messages(topic, "admin-made", ack_wait=7) as made:
            await made.next_message(timeout=5)
        async with locked.messages(topic, "admin-made", ack_wait=99, max_deliver=2) as consumer:
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=0.3)


async def test_existing_consumer_with_other_settings(backend: JetStreamBackend) -> None:
    topic = unique("mismatch")
    await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    async with backend.messages(topic, "worker", ack_wait=10) as consumer:
        (message,) = await collect(consumer, 1, 5, ack=False)
        await message.nack()
    with pytest.raises(ConfigError, match="ack_wait is 10"):
        await backend.messages(topic, "worker", ack_wait=20).next_message(timeout=1)
    async with backend.messages(
        topic, "worker", ack_wait=20, max_deliver=5, update_consumers=True
    ) as updated:
        (again,) = await collect(updated, 1, 5)
    assert again.delivery_attempt == 2
    jsm = backend.connection.jsm
    assert jsm is not None
    info: api.ConsumerInfo = await jsm.consumer_info(await backend.provisioner.stream_for(topic), "worker")
    assert (info.config.ack_wait, info.config.max_deliver) == (20, 5)


async def test_bad_consumer_options(backend: JetStreamBackend) -> None:
    with pytest.raises(ConfigError):
        backend.messages("t", "bad.name")
    with pytest.raises(ConfigError):
        backend.messages("t", "c", ack_wait=0)
    with pytest.raises(ConfigError):
        backend.messages("t", "c", no_such_option=1)
    with pytest.raises(ConfigError):
        backend.messages("t", "c", ack_wait=1, ack_deadline=1)
    with pytest.raises(ConfigError):
        backend.messages("t", "")  # no subscription and no `durable` setting
    with pytest.raises(ConfigError):
        backend.records(["a", "b"], "g")


async def test_push_consumers_are_refused(backend: JetStreamBackend, nats_server: ProcessServer) -> None:
    topic = unique("push")
    await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))
    jsm = backend.connection.jsm
    assert jsm is not None
    stream = await backend.provisioner.stream_for(topic)
    await jsm.add_consumer(
        stream, api.ConsumerConfig(durable_name="pushy", deliver_subject=unique("deliver"))
    )
    with pytest.raises(ConfigError, match="push consumer"):
        await backend.messages(topic, "pushy").next_message(timeout=1)
    async with broker.connect(f"{nats_server.url}?create_consumers=false") as locked:
        with pytest.raises(ConfigError, match="push consumer"):
            await locked.messages(topic, "pushy").next_message(timeout=2)
