"""Interop with NATS services that do not use polybroker (nats-py on one side), both ways.

The wire places are the ones docs/interop.md lists: the payload is the message data, the key the
``Polybroker-Key`` header, attributes are headers of the same name and value.
"""

from __future__ import annotations

import nats

from broker import OutboundMessage
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.mapping import KEY_HEADER
from broker.driver.devserver import ProcessServer
from tests.integration.jetstream.helpers import unique


async def test_raw_nats_producer_to_polybroker_consumer(
    backend: JetStreamBackend, nats_server: ProcessServer
) -> None:
    subject = unique("interop-in")
    client = await nats.connect(nats_server.url)
    try:
        js = client.jetstream()
        await js.add_stream(name=unique("RAW"), subjects=[subject])
        headers = {KEY_HEADER: "order-7", "tenant": "acme", "trace": "t-1", "Nats-Msg-Id": "raw-1"}
        await js.publish(subject, b"\x00raw-data", headers=headers)
    finally:
        await client.close()
    async with backend.messages(subject, "reader") as consumer:
        message = await consumer.next_message(timeout=10)
        await message.ack()
    assert message.data == b"\x00raw-data"
    assert message.key == "order-7"
    assert dict(message.attributes) == {"tenant": "acme", "trace": "t-1", "Nats-Msg-Id": "raw-1"}
    assert message.id == "1"  # the stream sequence


async def test_polybroker_producer_to_raw_nats_consumer(
    backend: JetStreamBackend, nats_server: ProcessServer
) -> None:
    subject = unique("interop-out")
    sent = OutboundMessage(b"\x00poly-data", key="order-7", attributes={"tenant": "acme", "trace": "t-1"})
    await backend.publisher().topic(subject).publish(sent)
    client = await nats.connect(nats_server.url)
    try:
        js = client.jetstream()
        subscription = await js.pull_subscribe(subject, durable=unique("raw"))
        (received,) = await subscription.fetch(1, timeout=10)
        await received.ack()
    finally:
        await client.close()
    assert received.data == b"\x00poly-data"
    assert received.headers == {KEY_HEADER: "order-7", "tenant": "acme", "trace": "t-1"}
