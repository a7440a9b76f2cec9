"""The Redis Streams backend beyond the conformance suite: URLs, the dev server, the entry layout both
ways (raw redis-py on the other side), and a nack delay longer than the ack deadline."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as raw_redis

import broker
from broker import OutboundMessage
from broker.backends.redis.backend import RedisBackend
from broker.backends.redis.mapping import Entry
from broker.driver.clock import clock
from broker.driver.devserver import ProcessServer
from broker.errors import ConfigError
from broker.retry import ATTR_MESSAGE_ID, ATTR_REASON, ATTR_SUBSCRIPTION, ATTR_TOPIC


def test_urls_fill_the_settings_and_hide_the_password() -> None:
    backend = broker.connect("redis://app:s%40cret@cache.example:7000/3?ack_deadline=5")
    assert isinstance(backend, RedisBackend)
    s = backend.settings
    assert (s.host, s.port, s.db, s.user, s.password, s.tls, s.ack_deadline) == (
        "cache.example",
        7000,
        3,
        "app",
        "s@cret",
        False,
        5.0,
    )
    assert "s@cret" not in repr(s) and "s@cret" not in repr(backend)
    default_user = broker.connect("rediss://:pw@cache.example")
    assert isinstance(default_user, RedisBackend)
    assert (default_user.settings.user, default_user.settings.password) == (None, "pw")
    assert default_user.settings.port == 6379 and default_user.settings.uses_tls
    for bad in ("redis://h/db1", "redis://h:port", "redis://h?poll_interval=2&ack_deadline=1"):
        with pytest.raises(ConfigError):
            broker.connect(bad)


async def test_dead_letters_keep_the_entry_and_say_why(backend: RedisBackend) -> None:
    """``dead_letter(reason)`` copies the entry with ``x-dead-letter-*`` attributes; an entry whose
    deadline passed on its last allowed delivery is moved when it is claimed, not handed out again."""
    options = {"ack_deadline": 0.3, "max_attempts": 1, "dead_letter_topic": "dl-letters"}
    async with (
        backend.messages("dl-letters", "inspect") as letters,
        backend.messages("dl-source", "app", **options) as consumer,
    ):
        publish = backend.publisher().topic("dl-source").batch_publish
        await publish(OutboundMessage(b"poison", key="k", attributes={"a": "1"}), OutboundMessage(b"stale"))
        poison = await consumer.next_message(timeout=10)
        stale = await consumer.next_message(timeout=10)  # never settled: its deadline passes
        await poison.dead_letter("cannot parse")
        with pytest.raises(asyncio.TimeoutError):  # reading, it claims the stale entry and moves it
            await consumer.next_message(timeout=0.8)
        got = [await letters.next_message(timeout=10), await letters.next_message(timeout=10)]
        await broker.ack_all(got)
    first, second = sorted(got, key=lambda m: m.data)
    assert (first.data, first.key, first.attributes["a"]) == (b"poison", "k", "1")
    assert first.attributes[ATTR_REASON] == "cannot parse"
    assert (first.attributes[ATTR_TOPIC], first.attributes[ATTR_SUBSCRIPTION]) == ("dl-source", "app")
    assert first.attributes[ATTR_MESSAGE_ID] == poison.id
    assert second.data == b"stale" and second.attributes[ATTR_MESSAGE_ID] == stale.id
    assert "max_attempts=1" in second.attributes[ATTR_REASON]
    assert await backend.backlog("dl-source", "app") == 0


async def test_the_dev_server_fsyncs_its_append_only_file(redis_server: ProcessServer) -> None:
    assert redis_server.port != 6379
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        config = await client.config_get("*")  # type: ignore[no-untyped-call]
    finally:
        await client.aclose()
    assert (config["appendonly"], config["appendfsync"], config["save"]) == ("yes", "always", "")
    assert config["bind"] == "127.0.0.1"


async def test_an_entry_added_by_raw_xadd_arrives_with_its_fields_as_attributes(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        async with backend.messages("interop-in", "app") as consumer:
            await client.xadd("interop-in", {"customer": "7", "total": "12.50"})
            await client.xadd("interop-in", {"data": b"\x00payload", "key": "k1", "attr:kind": "order"})
            first = await consumer.next_message(timeout=10)
            second = await consumer.next_message(timeout=10)
            await broker.ack_all([first, second])
    finally:
        await client.aclose()
    assert (first.data, first.key, dict(first.attributes)) == (b"", None, {"customer": "7", "total": "12.50"})
    assert (second.data, second.key, dict(second.attributes)) == (b"\x00payload", "k1", {"kind": "order"})
    assert isinstance(second.raw, Entry) and second.raw.id == second.id
    assert first.delivery_attempt == 1 and first.publish_time is not None


async def test_a_published_message_is_an_entry_raw_redis_py_reads(
    backend: RedisBackend, redis_server: ProcessServer
) -> None:
    await (
        backend.publisher()
        .topic("interop-out")
        .publish(OutboundMessage(b"hello", key="k", attributes={"data": "an attribute", "a": "1"}))
    )
    client = raw_redis.Redis(host=redis_server.host, port=redis_server.port)
    try:
        ((_, fields),) = await client.xrange("interop-out")
    finally:
        await client.aclose()
    assert fields == {b"data": b"hello", b"key": b"k", b"attr:data": b"an attribute", b"attr:a": b"1"}


async def test_a_nack_delay_longer_than_the_ack_deadline_is_held_then_redelivered(
    backend: RedisBackend,
) -> None:
    deadline, delay = 0.4, 1.0
    async with backend.messages("held", "app", ack_deadline=deadline) as consumer:
        await backend.publisher().topic("held").publish(OutboundMessage(b"later"))
        first = await consumer.next_message(timeout=10)
        started = clock.monotonic()
        await first.nack(delay=delay)
        second = await consumer.next_message(timeout=10)
        waited = clock.monotonic() - started
        await second.ack()
        with pytest.raises(asyncio.TimeoutError):
            await consumer.next_message(timeout=deadline * 1.5)
    assert second.id == first.id and second.delivery_attempt == 2
    assert waited >= delay * 0.9, f"redelivered after {waited:.2f}s, the delay was {delay}s"
