"""Interop with Pub/Sub services that do not use polybroker (google-cloud-pubsub on one side), both ways.

The wire places are the ones docs/interop.md lists: the payload is the message data, the key the
``polybroker-key`` attribute (or the ordering key, which consumers read too), attributes are
message attributes.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Iterator
from typing import Any

import grpc
from google.cloud import pubsub_v1  # type: ignore[import-untyped]
from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport
from google.pubsub_v1.services.subscriber.transports import SubscriberGrpcTransport

import broker
from broker import OutboundMessage
from broker.backends.pubsub.backend import PubsubBackend
from broker.backends.pubsub.mapping import KEY_ATTRIBUTE
from broker.driver.devserver import ProcessServer

PATIENCE = 15.0


@contextlib.contextmanager
def raw_clients(emulator: ProcessServer) -> Iterator[tuple[Any, Any, str]]:
    """A raw publisher (ordering on), a raw subscriber and a new topic: ``(publisher, subscriber, topic)``."""
    host = emulator.url.split("emulator_host=")[1].split("&")[0]
    channels = [grpc.insecure_channel(host), grpc.insecure_channel(host)]
    try:
        options = pubsub_v1.types.PublisherOptions(enable_message_ordering=True)
        publisher = pubsub_v1.PublisherClient(
            publisher_options=options, transport=PublisherGrpcTransport(channel=channels[0], host=host)
        )
        subscriber = pubsub_v1.SubscriberClient(
            transport=SubscriberGrpcTransport(channel=channels[1], host=host)
        )
        topic = f"projects/raw-interop/topics/interop-{uuid.uuid4().hex[:8]}"
        publisher.create_topic(name=topic)
        yield publisher, subscriber, topic
    finally:
        for channel in channels:
            channel.close()


async def test_raw_pubsub_producer_to_polybroker_consumer(pubsub_emulator: ProcessServer) -> None:
    with raw_clients(pubsub_emulator) as (publisher, _, topic):
        backend = broker.connect(pubsub_emulator.url)
        assert isinstance(backend, PubsubBackend)
        async with backend, backend.messages(topic, f"poly-{uuid.uuid4().hex[:8]}") as consumer:
            by_ordering_key = publisher.publish(
                topic, b"\x00one", ordering_key="order-7", tenant="acme", trace="t-1"
            )
            by_attribute = publisher.publish(
                topic, b"\x00two", **{KEY_ATTRIBUTE: "order-8", "tenant": "acme"}
            )
            sent_ids = {await asyncio.to_thread(f.result, PATIENCE) for f in (by_ordering_key, by_attribute)}
            got = {}
            for _ in range(2):
                message = await consumer.next_message(timeout=PATIENCE)
                await message.ack()
                got[message.data] = message
    assert set(got) == {b"\x00one", b"\x00two"}
    one, two = got[b"\x00one"], got[b"\x00two"]
    assert (one.key, dict(one.attributes)) == ("order-7", {"tenant": "acme", "trace": "t-1"})
    assert (two.key, dict(two.attributes)) == ("order-8", {"tenant": "acme"})
    assert {one.id, two.id} == sent_ids  # the Pub/Sub message ids


async def test_polybroker_producer_to_raw_pubsub_consumer(pubsub_emulator: ProcessServer) -> None:
    with raw_clients(pubsub_emulator) as (_, subscriber, topic):
        subscription = topic.replace("/topics/", "/subscriptions/")
        subscriber.create_subscription(name=subscription, topic=topic)
        backend = broker.connect(pubsub_emulator.url)
        assert isinstance(backend, PubsubBackend)
        sent = OutboundMessage(b"\x00poly-data", key="order-7", attributes={"tenant": "acme", "trace": "t-1"})
        async with backend:
            await backend.publisher().topic(topic).publish(sent)
        response = await asyncio.to_thread(
            subscriber.pull, subscription=subscription, max_messages=1, timeout=PATIENCE
        )
        (received,) = response.received_messages
        subscriber.acknowledge(subscription=subscription, ack_ids=[received.ack_id])
    assert received.message.data == b"\x00poly-data"
    assert dict(received.message.attributes) == {KEY_ATTRIBUTE: "order-7", "tenant": "acme", "trace": "t-1"}
    assert received.message.ordering_key == ""  # the key is an ordering key only with message_ordering on
