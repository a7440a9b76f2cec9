"""Schema Registry formats: our bindings against confluent-kafka's serializers on the raw client.

For Avro and Protobuf (an ``Order`` of 4 fields, ~25 bytes encoded), ``--messages`` values
(50,000) are published and consumed on one local Tansu, both sides against the same (``mock://``)
registry and with the same librdkafka configuration (the backend's own, built from
``KafkaSettings``):

raw:   confluent-kafka's ``AvroSerializer`` / ``ProtobufSerializer`` called per value, then
       ``Producer.produce(topic, data, callback=on_delivery)`` with ``poll(0)``, ``flush()``;
       consume: ``Consumer.consume(batch)``, confluent-kafka's ``AvroDeserializer`` /
       ``ProtobufDeserializer`` per record, ``commit(asynchronous=True)`` per batch, the last
       commit waited.
ours:  ``schemas.topic(publisher, topic, binding).batch_publish(*chunk)`` for chunks of ``--chunk``,
       all in flight; consume: ``schemas.batched_records(backend.batched_records(...), binding)``,
       ``record.decoded`` for every record, ``broker.commit_highest_offsets(batch)``, the last
       commit waited.

Each phase runs ``--rounds`` (5) times, raw and ours alternating which goes first; a consume round's
clock starts at the first non-empty batch (the group join is not timed); a topic holds the
warm-up record and the values, and a side stops at ``--messages`` records (a full last batch, as
in ``bench/kafka.py``, so no side waits out its consume timeout). Printed per format and
phase: best ours / best raw and the median of the per-round ratios (target >= 0.95 for both).

Usage: python bench/schemas.py [--messages N] [--chunk N] [--batch N] [--rounds N] [--url kafka://...]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
import uuid
from typing import Any

import broker
from broker import schemas
from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.rdkafka_config import consumer_config, producer_config
from broker.backends.kafka.registration import factory
from broker.backends.kafka.settings import KafkaSettings

CONSUMER_QUERY = "session_timeout=2&heartbeat_interval=0.3"
AVRO_ORDER = json.dumps(
    {
        "type": "record",
        "name": "Order",
        "namespace": "bench",
        "fields": [
            {"name": "id", "type": "long"},
            {"name": "item", "type": "string"},
            {"name": "qty", "type": "int"},
            {"name": "price", "type": "double"},
        ],
    }
)


def protobuf_order() -> Any:
    """A generated-at-run-time ``bench.Order`` message class (no protoc)."""
    from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(name="bench_order.proto", package="bench", syntax="proto3")
    order = proto.message_type.add(name="Order")
    for number, (name, kind) in enumerate(
        [
            ("id", field.TYPE_INT64),
            ("item", field.TYPE_STRING),
            ("qty", field.TYPE_INT32),
            ("price", field.TYPE_DOUBLE),
        ],
        start=1,
    ):
        order.field.add(name=name, number=number, type=kind, label=field.LABEL_OPTIONAL)
    pool = descriptor_pool.DescriptorPool()
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("bench.Order"))


class Format:
    """One format: our binding and confluent-kafka's serializer and deserializer, one registry."""

    def __init__(self, name: str) -> None:
        from confluent_kafka.schema_registry import SchemaRegistryClient, topic_subject_name_strategy

        client = SchemaRegistryClient.new_client({"url": f"mock://bench-{name}"})
        registry = schemas.Registry(client=client)
        conf = {"subject.name.strategy": topic_subject_name_strategy}
        self.name = name
        if name == "avro":
            from confluent_kafka.schema_registry.avro import AvroDeserializer, AvroSerializer

            self.binding: Any = schemas.avro(registry, AVRO_ORDER)
            self.serializer: Any = AvroSerializer(client, AVRO_ORDER, conf=conf)
            self.deserializer: Any = AvroDeserializer(client, AVRO_ORDER)
            self.make = lambda i: {"id": i, "item": "book", "qty": i % 7, "price": 9.5}
        else:
            from confluent_kafka.schema_registry.protobuf import ProtobufDeserializer, ProtobufSerializer

            order = protobuf_order()
            self.binding = schemas.protobuf(registry, order)
            self.serializer = ProtobufSerializer(order, client, conf=conf)
            self.deserializer = ProtobufDeserializer(order, {"use.deprecated.format": False})
            self.make = lambda i: order(id=i, item="book", qty=i % 7, price=9.5)


def raw_produce(settings: KafkaSettings, fmt: Format, topic: str, values: list[Any]) -> float:
    from confluent_kafka import Producer
    from confluent_kafka.serialization import MessageField, SerializationContext

    producer = Producer(producer_config(settings))
    ctx = SerializationContext(topic, MessageField.VALUE)
    serialize = fmt.serializer
    producer.produce(topic, serialize(values[0], ctx))  # warm-up: registers the schema
    producer.flush()
    delivered = failed = 0

    def on_delivery(err: Any, msg: Any) -> None:
        nonlocal delivered, failed
        failed += err is not None
        delivered += 1

    produce, poll = producer.produce, producer.poll
    start = time.perf_counter()
    for value in values:
        data = serialize(value, ctx)
        while True:
            try:
                produce(topic, data, callback=on_delivery)
                break
            except BufferError:
                poll(0.001)
        poll(0)
    producer.flush()
    elapsed = time.perf_counter() - start
    assert delivered == len(values) and failed == 0, (delivered, failed)
    return len(values) / elapsed


async def ours_produce(
    backend: KafkaBackend, fmt: Format, topic: str, values: list[Any], chunk: int
) -> float:
    async with backend.publisher() as publisher:
        handle = schemas.topic(publisher, topic, fmt.binding)
        await handle.publish(values[0])  # warm-up: registers the schema (in a worker thread)
        start = time.perf_counter()
        await asyncio.gather(
            *(handle.batch_publish(*values[i : i + chunk]) for i in range(0, len(values), chunk))
        )
        elapsed = time.perf_counter() - start
    return len(values) / elapsed


def raw_consume(settings: KafkaSettings, fmt: Format, topic: str, count: int, batch: int) -> float:
    from confluent_kafka import Consumer, TopicPartition
    from confluent_kafka.serialization import MessageField, SerializationContext

    options = settings.consumer_options(batch_size=batch)
    consumer = Consumer(consumer_config(settings, options, f"raw-{uuid.uuid4().hex}"))
    consumer.subscribe([topic])
    ctx = SerializationContext(topic, MessageField.VALUE)
    deserialize = fmt.deserializer
    received, start, ends = 0, None, {}
    try:
        while received < count:
            messages = consumer.consume(batch, 1.0)
            if not messages:
                continue
            if start is None:
                start = time.perf_counter()
            ends = {}
            values = []
            for message in messages:
                if message.error() is not None:
                    continue
                values.append(deserialize(message.value(), ctx))
                ends[(message.topic(), message.partition())] = message.offset() + 1
                received += 1
            consumer.commit(
                offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=True
            )
        consumer.commit(offsets=[TopicPartition(t, p, o) for (t, p), o in ends.items()], asynchronous=False)
        assert start is not None
        return count / (time.perf_counter() - start)
    finally:
        consumer.close()


async def ours_consume(backend: KafkaBackend, fmt: Format, topic: str, count: int, batch: int) -> float:
    received, start = 0, None
    source = backend.batched_records(topic, f"ours-{uuid.uuid4().hex}", batch_size=batch)
    async with schemas.batched_records(source, fmt.binding) as batches:
        while received < count:
            records = await batches.next_batch()
            if not records:
                continue
            if start is None:
                start = time.perf_counter()
            values = [record.decoded for record in records]
            received += len(values)
            await broker.commit_highest_offsets(records)
        await source.commit()
    assert start is not None
    return count / (time.perf_counter() - start)


def report(label: str, raw: list[float], ours: list[float]) -> tuple[float, float]:
    best = max(ours) / max(raw)
    median = statistics.median(o / r for o, r in zip(ours, raw, strict=True))
    print(
        f"{label:<18} best raw {max(raw):>9,.0f} msg/s  best ours {max(ours):>9,.0f} msg/s  "
        f"ratio best {best:.3f}  median {median:.3f} (target >= 0.95)"
    )
    return best, median


async def run(url: str, args: argparse.Namespace) -> list[tuple[float, float]]:
    backend = broker.connect(f"{url}?{CONSUMER_QUERY}")
    assert isinstance(backend, KafkaBackend)
    settings = backend.settings
    results = []
    async with backend:
        for name in ("avro", "protobuf"):
            fmt = Format(name)
            values = [fmt.make(i) for i in range(args.messages)]
            rates: dict[str, list[float]] = {"raw-p": [], "ours-p": [], "raw-c": [], "ours-c": []}
            for round_ in range(args.rounds):
                topics = {side: f"bench-schemas-{side}-{uuid.uuid4().hex[:8]}" for side in ("raw", "ours")}
                for topic in topics.values():
                    await backend.admin.create_topic(topic, args.partitions)
                order = ["raw", "ours"] if round_ % 2 == 0 else ["ours", "raw"]
                for side in order:
                    if side == "raw":
                        rates["raw-p"].append(raw_produce(settings, fmt, topics["raw"], values))
                    else:
                        rates["ours-p"].append(
                            await ours_produce(backend, fmt, topics["ours"], values, args.chunk)
                        )
                for side in order:
                    if side == "raw":
                        rate = raw_consume(settings, fmt, topics["raw"], args.messages, args.batch)
                        rates["raw-c"].append(rate)
                    else:
                        rate = await ours_consume(backend, fmt, topics["ours"], args.messages, args.batch)
                        rates["ours-c"].append(rate)
            results.append(report(f"{name} publish", rates["raw-p"], rates["ours-p"]))
            results.append(report(f"{name} consume", rates["raw-c"], rates["ours-c"]))
    return results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--messages", type=int, default=50_000)
    parser.add_argument("--chunk", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--partitions", type=int, default=1)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--url", default=None, help="an existing Kafka broker (default: start a local Tansu)")
    args = parser.parse_args()
    if args.url:
        results = asyncio.run(run(args.url, args))
    else:
        with factory.dev_server() as server:
            results = asyncio.run(run(server.url, args))
    met = all(best >= 0.95 and median >= 0.95 for best, median in results)
    print(f"target >= 0.95 (best and median, every line): {'met' if met else 'NOT met'}")


if __name__ == "__main__":
    main()
