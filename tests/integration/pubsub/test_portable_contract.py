"""The portable contract on Pub/Sub (issue 14), against Google's emulator.

* lifecycle orders: a consumer entered before its topic exists, open-close-publish-reopen, a
  plain (never entered) iterator, and publishing before any subscription exists;
* keys with default settings (no message ordering): carried as the ``polybroker-key`` attribute;
* the portable option names (``ack_deadline``, ``max_attempts``, ``dead_letter_topic``,
  ``batch_size``, ``start``) map onto the subscription or are refused with a typed error;
* ``create_missing=false``: entering a consumer on a missing subscription is a typed error;
* attributes, data and keys round-trip byte-exact between this library and the raw client.

No test creates a topic or a subscription up front: that is the consumer's job.
"""

from __future__ import annotations

import asyncio
import itertools
import uuid
from collections.abc import AsyncIterator
from typing import Any

import grpc  # type: ignore[import-untyped]
import pytest
from google.cloud import pubsub_v1  # type: ignore[import-untyped]
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport
from google.pubsub_v1.types import PubsubMessage

import broker
from broker.backends.pubsub.backend import BACKLOG_FOR_NEW_SUBSCRIPTIONS, PubsubBackend
from broker.backends.pubsub.mapping import KEY_ATTRIBUTE
from broker.driver.devserver import ProcessServer
from broker.errors import ConfigError, InvalidAttributes, NotSupported, UnknownSetting, UnknownTopic
from broker.message import Message, OutboundMessage
from broker.testing import collect, drain

PATIENCE = 15.0
_names = itertools.count()


def name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}-{next(_names)}"


async def connect(emulator: ProcessServer, **settings: str) -> PubsubBackend:
    query = "".join(f"&{key}={value}" for key, value in settings.items())
    backend = broker.connect(emulator.url + query)
    assert isinstance(backend, PubsubBackend)
    return backend


@pytest.fixture
async def backend(pubsub_emulator: ProcessServer) -> AsyncIterator[PubsubBackend]:
    async with await connect(pubsub_emulator) as b:
        yield b


def emulator_host(emulator: ProcessServer) -> str:
    return emulator.url.split("emulator_host=")[1].split("&")[0]


class Raw:
    """The raw google-cloud-pubsub clients on the emulator (blocking calls, run in a thread)."""

    def __init__(self, emulator: ProcessServer, project: str) -> None:
        host = emulator_host(emulator)
        self.project = project
        self._pub_channel = grpc.insecure_channel(host)
        self._sub_channel = grpc.insecure_channel(host)
        self.publisher = pubsub_v1.PublisherClient(
            publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True),
            transport=PublisherGrpcTransport(channel=self._pub_channel, host=host),
        )
        self.subscriber = pubsub_v1.SubscriberClient(
            transport=SubscriberGrpcTransport(channel=self._sub_channel, host=host)
        )

    def topic(self, name: str) -> str:
        return f"projects/{self.project}/topics/{name}"

    def subscription(self, name: str) -> str:
        return f"projects/{self.project}/subscriptions/{name}"

    def close(self) -> None:
        self._pub_channel.close()
        self._sub_channel.close()


@pytest.fixture
def raw(pubsub_emulator: ProcessServer, backend: PubsubBackend) -> Any:
    clients = Raw(pubsub_emulator, backend.settings.project)
    yield clients
    clients.close()


async def subscription_exists(backend: PubsubBackend, subscription: str) -> bool:
    from google.api_core import exceptions as api_exceptions

    client = backend.clients.async_subscriber()
    try:
        await client.get_subscription(subscription=backend.clients.subscription_path(subscription))
    except api_exceptions.NotFound:
        return False
    return True


# -- finding 4: lifecycle orders -------------------------------------------------------------
async def test_capability_publish_before_subscribe_is_not_retained(backend: PubsubBackend) -> None:
    assert BACKLOG_FOR_NEW_SUBSCRIPTIONS is False
    assert backend.capabilities.backlog_for_new_subscriptions is False


async def test_messages_entered_before_the_topic_exists_gets_what_is_published_next(
    backend: PubsubBackend,
) -> None:
    topic, sub = name("topic"), name("sub")
    async with backend.messages(topic, sub) as consumer:
        assert await subscription_exists(backend, sub), "entering did not create the subscription"
        await backend.publisher().topic(topic).publish(OutboundMessage(b"after-enter"))
        (message,) = await collect(consumer, 1, PATIENCE)
    assert message.data == b"after-enter"


async def test_batched_messages_entered_first_gets_what_is_published_next(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    async with backend.batched_messages(topic, sub, batch_size=5, batch_timeout=0.5) as batches:
        await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(5)))
        got: list[Message] = []
        async with asyncio.timeout(PATIENCE):
            while len(got) < 5:
                batch = await batches.next_batch()
                await broker.ack_all(batch)
                got.extend(batch)
    assert sorted(int(m.data) for m in got) == list(range(5))


async def test_receiver_entered_first_gets_what_is_published_next(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    got: list[bytes] = []
    arrived = asyncio.Event()

    async def handler(message: Message) -> None:
        got.append(message.data)
        await message.ack()
        arrived.set()

    async with backend.receiver(topic, sub) as receiver:
        assert await subscription_exists(backend, sub), "entering did not create the subscription"
        await backend.publisher().topic(topic).publish(OutboundMessage(b"to-the-receiver"))
        task = asyncio.ensure_future(receiver.receive(handler))
        async with asyncio.timeout(PATIENCE):
            await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert got == [b"to-the-receiver"]


async def test_open_close_publish_reopen_delivers_what_was_published_while_closed(
    backend: PubsubBackend,
) -> None:
    topic, sub = name("topic"), name("sub")
    async with backend.messages(topic, sub):
        pass  # opened and closed without a single pull
    await backend.publisher().topic(topic).batch_publish(*(OutboundMessage(b"%d" % i) for i in range(10)))
    async with backend.messages(topic, sub) as consumer:
        got = await collect(consumer, 10, PATIENCE)
        got += await drain(consumer, 1.0)
    assert sorted(int(m.data) for m in got) == list(range(10))


async def test_a_plain_iterator_opens_on_its_first_call(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    consumer = backend.messages(topic, sub)  # never entered
    try:
        waiting = asyncio.ensure_future(consumer.next_message(timeout=PATIENCE))
        async with asyncio.timeout(PATIENCE):
            while not await subscription_exists(backend, sub):  # noqa: ASYNC110 - no event to wait on
                await asyncio.sleep(0.05)
        await backend.publisher().topic(topic).publish(OutboundMessage(b"plain"))
        message = await waiting
        await message.ack()
        assert message.data == b"plain"
    finally:
        await consumer.close()


async def test_publish_before_any_subscription_is_not_delivered(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    publisher = backend.publisher().topic(topic)
    await publisher.publish(OutboundMessage(b"before"))  # the topic exists, no subscription yet
    async with backend.messages(topic, sub) as consumer:
        await publisher.publish(OutboundMessage(b"after"))
        got = await collect(consumer, 1, PATIENCE)
        got += await drain(consumer, 2.0)
    assert [m.data for m in got] == [b"after"]


# -- finding 5: keys without ordering --------------------------------------------------------
async def test_keys_round_trip_with_default_settings(backend: PubsubBackend, raw: Raw) -> None:
    assert not backend.capabilities.per_key_order
    topic, sub, peek = name("topic"), name("sub"), name("peek")
    sent = [
        OutboundMessage(b"alice", key="alice", attributes={"kind": "order"}),
        OutboundMessage(b"bob", key="bob"),
        OutboundMessage(b"empty-key", key=""),
        OutboundMessage(b"", key="no-data"),
        OutboundMessage(b"none", key=None, attributes={"a": "1"}),
    ]
    async with backend.messages(topic, sub) as consumer, backend.messages(topic, peek):
        publisher = backend.publisher().topic(topic)
        await publisher.publish(sent[0])
        await publisher.batch_publish(*sent[1:])
        got = {m.data: m for m in await collect(consumer, len(sent), PATIENCE)}
    for out in sent:
        assert got[out.data].key == out.key, out
        assert dict(got[out.data].attributes) == dict(out.attributes), out
    # on the wire: the reserved attribute, no ordering key
    response = await asyncio.to_thread(
        raw.subscriber.pull, subscription=raw.subscription(peek), max_messages=10, timeout=PATIENCE
    )
    wire = {r.message.data: r.message for r in response.received_messages}
    assert wire[b"alice"].attributes[KEY_ATTRIBUTE] == "alice"
    assert wire[b"alice"].ordering_key == ""
    assert KEY_ATTRIBUTE not in wire[b"none"].attributes


async def test_keys_round_trip_through_a_receiver(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    got: list[Message] = []
    arrived = asyncio.Event()

    async def handler(message: Message) -> None:
        got.append(message)
        await message.ack()
        if len(got) == 2:
            arrived.set()

    async with backend.receiver(topic, sub) as receiver:
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(OutboundMessage(b"1", key="k", attributes={"x": "y"}), OutboundMessage(b"2"))
        )
        task = asyncio.ensure_future(receiver.receive(handler))
        async with asyncio.timeout(PATIENCE):
            await arrived.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    by_data = {m.data: m for m in got}
    assert (by_data[b"1"].key, dict(by_data[b"1"].attributes)) == ("k", {"x": "y"})
    assert (by_data[b"2"].key, dict(by_data[b"2"].attributes)) == (None, {})


async def test_the_key_attribute_is_reserved(backend: PubsubBackend) -> None:
    topic = backend.publisher().topic(name("topic"))
    with pytest.raises(InvalidAttributes, match=KEY_ATTRIBUTE):
        await topic.publish(OutboundMessage(b"x", attributes={KEY_ATTRIBUTE: "k"}))


async def test_keys_with_ordering_are_ordering_keys(pubsub_emulator: ProcessServer, raw: Raw) -> None:
    async with await connect(pubsub_emulator, message_ordering="true") as ordered:
        topic, sub, peek = name("topic"), name("sub"), name("peek")
        async with ordered.messages(topic, sub) as consumer, ordered.messages(topic, peek):
            await (
                ordered.publisher()
                .topic(topic)
                .batch_publish(OutboundMessage(b"a", key="alice"), OutboundMessage(b"e", key=""))
            )
            got = {m.data: m.key for m in await collect(consumer, 2, PATIENCE)}
        assert got == {b"a": "alice", b"e": ""}
        response = await asyncio.to_thread(
            raw.subscriber.pull, subscription=raw.subscription(peek), max_messages=10, timeout=PATIENCE
        )
        wire = {r.message.data: r.message for r in response.received_messages}
        assert wire[b"a"].ordering_key == "alice" and KEY_ATTRIBUTE not in wire[b"a"].attributes


# -- item 4: portable option names -----------------------------------------------------------
async def test_portable_option_names_map_onto_the_subscription(backend: PubsubBackend) -> None:
    topic, sub, dead = name("topic"), name("sub"), name("dead")
    async with backend.messages(topic, sub, ack_deadline=12, max_attempts=7, dead_letter_topic=dead):
        client = backend.clients.async_subscriber()
        found = await client.get_subscription(subscription=backend.clients.subscription_path(sub))
    assert found.ack_deadline_seconds == 12
    assert found.dead_letter_policy.dead_letter_topic == backend.clients.topic_path(dead)
    assert found.dead_letter_policy.max_delivery_attempts == 7
    # batch_size is the pull size of messages(); start="latest" is what Pub/Sub does anyway
    async with backend.messages(topic, name("sub"), batch_size=3, start="latest") as consumer:
        assert consumer.options.pull_max_messages == 3


async def test_portable_option_names_out_of_range_are_config_errors(backend: PubsubBackend) -> None:
    topic, sub = name("topic"), name("sub")
    with pytest.raises(ConfigError, match="10 and 600"):
        backend.messages(topic, sub, ack_deadline=5)
    with pytest.raises(ConfigError, match="10 and 600"):
        backend.receiver(topic, sub, ack_deadline=601)
    with pytest.raises(ConfigError, match="5 and 100"):
        backend.messages(topic, sub, max_attempts=2, dead_letter_topic="d")
    with pytest.raises(ConfigError, match="dead_letter_topic"):
        backend.messages(topic, sub, max_attempts=5)  # Pub/Sub counts only towards a dead-letter topic
    with pytest.raises(ConfigError, match="max_attempts"):
        backend.messages(topic, sub, max_attempts=6, max_delivery_attempts=7, dead_letter_topic="d")
    with pytest.raises(NotSupported, match="earliest"):
        backend.messages(topic, sub, start="earliest")
    for option in ("ack_deadline", "max_attempts", "dead_letter_topic", "batch_size", "start"):
        try:
            backend.batched_messages(topic, sub, **{option: None})
        except UnknownSetting:  # pragma: no cover - the failure this test is about
            pytest.fail(f"{option} is a portable name")
        except (ConfigError, NotSupported, TypeError, ValueError):
            pass


async def test_portable_option_names_at_connection_level(pubsub_emulator: ProcessServer) -> None:
    async with await connect(pubsub_emulator, max_attempts="6", dead_letter_topic="dead") as backend:
        topic, sub = name("topic"), name("sub")
        async with backend.messages(topic, sub):
            client = backend.clients.async_subscriber()
            found = await client.get_subscription(subscription=backend.clients.subscription_path(sub))
        assert found.dead_letter_policy.max_delivery_attempts == 6
    with pytest.raises(ConfigError, match="5 and 100"):
        await connect(pubsub_emulator, max_attempts="200", dead_letter_topic="dead")


# -- item 5: create_missing=false ------------------------------------------------------------
async def test_entering_a_missing_subscription_without_create_missing_is_unknown_topic(
    pubsub_emulator: ProcessServer, backend: PubsubBackend
) -> None:
    topic = name("topic")
    await backend.publisher().topic(topic).publish(OutboundMessage(b"x"))  # the topic exists
    async with await connect(pubsub_emulator, create_missing="false") as strict:
        for make in (
            lambda: strict.messages(topic, name("sub")),
            lambda: strict.batched_messages(topic, name("sub")),
            lambda: strict.receiver(topic, name("sub")),
        ):
            with pytest.raises(UnknownTopic, match="create_missing"):
                async with make():
                    pass
    assert not await subscription_exists(backend, "never-created")


# -- item 6: bytes stay bytes against the raw client -----------------------------------------
ODD_VALUES = {
    "empty": "",
    "space": " ",
    "unicode": "naïve ☃ 東京 🎉",
    "nul": "a\x00b",
    "controls": "\t\r\n\x7f",
    "long": "v" * 1024,
}


async def test_raw_publish_our_receive_is_byte_exact(backend: PubsubBackend, raw: Raw) -> None:
    topic, sub = name("topic"), name("sub")
    payload = bytes(range(256))
    async with backend.messages(topic, sub) as consumer:
        futures = [
            raw.publisher.publish(raw.topic(topic), payload, ordering_key="ключ-1", **ODD_VALUES),
            raw.publisher.publish(raw.topic(topic), b"\x00", **{KEY_ATTRIBUTE: "attr-key", "a": ""}),
        ]
        for future in futures:
            await asyncio.to_thread(future.result, PATIENCE)
        got = {m.data: m for m in await collect(consumer, 2, PATIENCE)}
    assert got[payload].key == "ключ-1"
    assert dict(got[payload].attributes) == ODD_VALUES
    assert got[b"\x00"].key == "attr-key"
    assert dict(got[b"\x00"].attributes) == {"a": ""}


async def test_our_publish_raw_receive_is_byte_exact(pubsub_emulator: ProcessServer, raw: Raw) -> None:
    payload = bytes(range(256)) * 3
    for ordering in ("false", "true"):
        async with await connect(pubsub_emulator, message_ordering=ordering) as backend:
            topic, sub = name("topic"), name("sub")
            async with backend.messages(topic, sub):
                await (
                    backend.publisher()
                    .topic(topic)
                    .publish(OutboundMessage(payload, key="ключ-2", attributes=ODD_VALUES))
                )
            response = await asyncio.to_thread(
                raw.subscriber.pull, subscription=raw.subscription(sub), max_messages=1, timeout=PATIENCE
            )
            (received,) = response.received_messages
            message: PubsubMessage = received.message
            assert message.data == payload
            attributes = dict(message.attributes)
            if ordering == "true":
                assert message.ordering_key == "ключ-2"
            else:
                assert message.ordering_key == ""
                assert attributes.pop(KEY_ATTRIBUTE) == "ключ-2"
            assert attributes == ODD_VALUES


# -- item 5: Google API errors become typed errors a caller can act on -----------------------
@pytest.mark.parametrize(
    ("google_error", "expected", "retryable"),
    [
        ("PermissionDenied", "PermissionDenied", False),
        ("Unauthenticated", "AuthenticationFailed", False),
        ("ResourceExhausted", "Throttled", True),
        ("TooManyRequests", "Throttled", True),
        ("ServiceUnavailable", "ConnectionFailed", True),
        ("NotFound", "UnknownTopic", False),
    ],
)
def test_google_api_errors_are_typed(google_error: str, expected: str, retryable: bool) -> None:
    from google.api_core import exceptions as api_exceptions

    from broker import errors
    from broker.backends.pubsub.errors import translate

    sdk_error = getattr(api_exceptions, google_error)("no")
    error = translate(sdk_error, "pulling", errors.ReceiveError)
    assert type(error) is getattr(errors, expected)
    assert error.retryable is retryable
    assert error.__cause__ is sdk_error
    retried = api_exceptions.RetryError("deadline", sdk_error)
    if google_error not in ("ServiceUnavailable",):
        assert type(translate(retried, "pulling", errors.ReceiveError)) is getattr(errors, expected)
