"""Publishing: PubAcks, de-duplication on retry, headers <-> key and attributes, errors."""

from __future__ import annotations

import pytest

import broker
from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.mapping import ENCODED_HEADER, KEY_HEADER, decode_headers, encode_headers
from broker.driver.devserver import ProcessServer
from broker.driver.testing.harness import collect, drain
from broker.errors import ClosedError, ConfigError, MessageTooLarge, Timeout, UnknownTopic
from tests.integration.jetstream.helpers import stored, unique


async def test_publishing_the_same_msg_id_again_stores_it_once(backend: JetStreamBackend) -> None:
    topic = unique("dedup")
    handle = backend.publisher().topic(topic)
    message = OutboundMessage(b"order-42", attributes={"Nats-Msg-Id": "order-42"})
    await handle.publish(message)
    await handle.publish(message)  # the retry of a publish whose PubAck was lost
    await handle.batch_publish(message, OutboundMessage(b"other", attributes={"Nats-Msg-Id": "order-43"}))
    assert await stored(backend, topic) == 2
    async with backend.messages(topic, "reader") as consumer:
        got = await collect(consumer, 2, 5)
        assert await drain(consumer, 0.3) == []
    assert sorted(m.data for m in got) == [b"order-42", b"other"]
    assert {m.attributes["Nats-Msg-Id"] for m in got} == {"order-42", "order-43"}


async def test_timed_out_publishes_are_retried_idempotently(backend: JetStreamBackend) -> None:
    topic = unique("retry")
    handle = backend.publisher().topic(topic)
    await handle.publish(OutboundMessage(b"warm-up", attributes={"Nats-Msg-Id": "w"}))
    # A deadline no PubAck can meet: every attempt (1 + publish_retries) times out and is re-sent.
    with pytest.raises(Timeout, match="3 attempts"):
        await handle.publish(OutboundMessage(b"once", attributes={"Nats-Msg-Id": "once"}), timeout=1e-6)
    await backend.connection.flush(5)
    assert await stored(backend, topic) == 2  # the three sends of "once" were stored once
    with pytest.raises(Timeout):  # without an id there is no retry (it could store it twice)
        await handle.publish(OutboundMessage(b"no-id"), timeout=1e-6)
    await backend.connection.flush(5)
    assert await stored(backend, topic) == 3


async def test_msg_id_attribute_can_be_renamed(nats_server: ProcessServer) -> None:
    topic = unique("rename")
    async with broker.connect(f"{nats_server.url}?msg_id_attribute=event_id") as backend:
        handle = backend.publisher().topic(topic)
        for _ in range(2):
            await handle.publish(OutboundMessage(b"e1", attributes={"event_id": "e-1", "kind": "x"}))
        async with backend.messages(topic, "reader") as consumer:
            (message,) = await collect(consumer, 1, 5)
            assert await drain(consumer, 0.3) == []
        assert dict(message.attributes) == {"event_id": "e-1", "kind": "x"}
        with pytest.raises(broker.errors.InvalidAttributes):
            await handle.publish(OutboundMessage(b"e2", attributes={"Nats-Msg-Id": "e-2"}))


async def test_attributes_headers_cannot_carry_round_trip(backend: JetStreamBackend) -> None:
    topic = unique("headers")
    odd = {
        "with space": "v",
        "trailing": "value ",
        "lines": "a\r\nb",
        KEY_HEADER: "not the key",
        "ünïcode-name": "ünïcode value",
        "empty": "",
        "Status": "409",  # looks like a NATS status header
    }
    sent = [
        OutboundMessage(b"1", key=" padded key ", attributes=odd),
        OutboundMessage(b"2", key="multi\nline"),
        OutboundMessage(b"3", key=""),
        OutboundMessage(b"4", key=None, attributes={"plain": "header"}),
    ]
    await backend.publisher().topic(topic).batch_publish(*sent)
    async with backend.messages(topic, "reader") as consumer:
        got = {m.data: m for m in await collect(consumer, len(sent), 5)}
    for out in sent:
        assert got[out.data].key == out.key
        assert dict(got[out.data].attributes) == dict(out.attributes)


def test_header_encoding_is_plain_where_it_can_be() -> None:
    assert encode_headers(None, {}) is None
    assert encode_headers("k", {"a": "1"}) == {KEY_HEADER: "k", "a": "1"}
    encoded = encode_headers("k\n", {"a b": "1", "c": "2"})
    assert encoded is not None and encoded["c"] == "2" and ENCODED_HEADER in encoded
    assert decode_headers(encoded) == ("k\n", {"a b": "1", "c": "2"})
    with pytest.raises(broker.errors.InvalidAttributes):
        encode_headers(None, {"Nats-Msg-Id": "two\nlines"})  # it would not de-duplicate
    # Headers from other clients come through untouched, even one that looks like ours.
    assert decode_headers({ENCODED_HEADER: "not json", "x": "y"}) == (
        None,
        {ENCODED_HEADER: "not json", "x": "y"},
    )


async def test_publish_errors(backend: JetStreamBackend, nats_server: ProcessServer) -> None:
    publisher = backend.publisher()
    with pytest.raises(ConfigError):
        publisher.topic("bad subject")
    with pytest.raises(ConfigError):
        publisher.topic("orders.*")  # wildcards are for consumers
    with pytest.raises(MessageTooLarge):
        await publisher.topic(unique("big")).publish(OutboundMessage(b"x" * (1024 * 1024 + 1)))
    async with broker.connect(f"{nats_server.url}?create_streams=false") as locked:
        with pytest.raises(UnknownTopic):
            await locked.publisher().topic(unique("nostream")).publish(OutboundMessage(b"x"))


async def test_publisher_close_is_safe_before_and_after_use(backend: JetStreamBackend) -> None:
    unused = backend.publisher()
    await unused.close()  # never connected: nothing to close (lib-brokers dereferences a nil connection here)
    await unused.close()
    used = backend.publisher()
    handle = used.topic(unique("closing"))
    await handle.publish(OutboundMessage(b"x"))
    await used.close()
    with pytest.raises(ClosedError):
        await handle.publish(OutboundMessage(b"late"))
    with pytest.raises(ClosedError):
        used.topic("another")


async def test_a_deleted_stream_is_made_again_on_publish(backend: JetStreamBackend) -> None:
    topic = unique("deleted")
    handle = backend.publisher().topic(topic)
    await handle.publish(OutboundMessage(b"1"))
    jsm = backend.connection.jsm
    assert jsm is not None
    await jsm.delete_stream(await backend.provisioner.stream_for(topic))
    await handle.publish(OutboundMessage(b"2"))
    assert await stored(backend, topic) == 1
