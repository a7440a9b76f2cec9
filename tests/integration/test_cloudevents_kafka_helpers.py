"""Type bindings and CloudEvents in the Kafka helpers (broker.backends.kafka.client) on Tansu.

The helper producer takes ``binding_codec(...)`` as its value codec (a typed value; a CloudEvent in
structured mode), produces a binary-mode CloudEvent as the binding lays it out, and the helper
consumer's handler decodes with the same codecs; the reference SDK's Kafka binding reads both
events from the raw records.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Iterator
from typing import Any

import pytest
from cloudevents.core.bindings import kafka
from cloudevents.core.formats.json import JSONFormat

import broker
from broker.backends.kafka.client import Consumer, Producer
from broker.driver.devserver import ProcessServer
from broker.typed import binding_codec, cloudevents
from tests.integration.kafka.support import TEST_QUERY, tansu, unique


@dataclasses.dataclass
class Order:
    customer: str
    amount: float


@pytest.fixture(scope="module")
def server() -> Iterator[ProcessServer]:
    with tansu() as started:
        yield started


async def test_helper_producer_and_consumer_take_binding_codecs(server: ProcessServer) -> None:
    config = {"bootstrap.servers": server.url.removeprefix("kafka://")}
    typed_topic, event_topic = unique("typed"), unique("events")
    async with broker.connect(f"{server.url}?{TEST_QUERY}") as backend:
        await backend.admin.create_topic(typed_topic, 1)  # type: ignore[attr-defined]
        await backend.admin.create_topic(event_topic, 1)  # type: ignore[attr-defined]
    orders = binding_codec(Order)
    bound = cloudevents.binding(Order, protocol="kafka")
    events = binding_codec(bound)
    structured = cloudevents.CloudEvent("com.example.order", "/shop", Order("ann", 2.5), id="s-1")
    binary = cloudevents.CloudEvent("com.example.order", "/shop", Order("bob", 4.0), id="b-1")
    async with Producer(config, value_codec=orders) as producer:
        await producer.sync_produce(typed_topic, "ann", Order("ann", 2.5))
    async with Producer(config, value_codec=events) as producer:
        await producer.sync_produce(
            event_topic, "ann", structured, headers={"content-type": cloudevents.STRUCTURED_CONTENT_TYPE}
        )
        message = bound.message(binary, key="bob")
        await producer.sync_produce_message(
            event_topic, message.data, key=message.key, headers=message.attributes
        )

    got: dict[str, list[Any]] = {typed_topic: [], event_topic: []}
    done = asyncio.Event()

    async def handler(record: Any, commit: Any) -> None:
        got[record.topic()].append(record)
        await commit()
        if len(got[typed_topic]) == 1 and len(got[event_topic]) == 2:
            done.set()

    group = {
        **config,
        "group.id": unique("helpers"),
        "auto.offset.reset": "earliest",
        "session.timeout.ms": 2000,
        "heartbeat.interval.ms": 300,
        "fetch.wait.max.ms": 100,
    }
    consumer = Consumer(group, handler, [typed_topic, event_topic], poll_timeout=0.1)
    consumer.start()
    try:
        async with asyncio.timeout(20):
            await done.wait()
    finally:
        await consumer.close()
    assert orders.decode(got[typed_topic][0].value()) == Order("ann", 2.5)
    first, second = got[event_topic]
    assert events.decode(first.value()) == dataclasses.replace(structured, datacontenttype="application/json")
    for record, sent in ((first, structured), (second, binary)):
        headers = {name: value for name, value in record.headers() or []}
        parsed = kafka.from_kafka(kafka.KafkaMessage(headers, record.key(), record.value()), JSONFormat())
        assert parsed.get_attributes() == {
            **sent.attributes(),
            "datacontenttype": "application/json",
            "partitionkey": record.key().decode(),  # the SDK reads the key as the partitionkey
        }
        assert sent.data is not None and parsed.get_data() == dataclasses.asdict(sent.data)
