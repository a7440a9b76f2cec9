"""Kafka backend on confluent-kafka: ``broker.connect("kafka://host:9092?group_id=orders")``.

* ``publisher()`` / ``transactional_publisher()``: ``publish`` returns when the broker acknowledged
  the record; ``batch_publish`` enqueues everything, then waits once.
* ``records(topics, group)`` / ``batched_records(...)``: consumer-group members with manual
  commits; ``Record.ack()`` commits ``offset + 1`` of its partition (queued at once, without
  waiting for the broker; the iterator's ``commit()`` waits, revoke and close flush).
* ``log()``: the ``broker.log`` port (partitions, watermarks, groups with rebalance listeners,
  readers) that the marker queue and the stream processor run on.
* ``broker.backends.kafka.client``: Kafka-specific helpers (producer with codecs, sync produce, consumer
  with explicit commits, reader from explicit offsets, lag and message counts).
* ``registration.factory.dev_server()``: a local Tansu broker for development and tests.

Importing this package does not import confluent-kafka; opening a backend does.
"""

from broker.backends.kafka.registration import KafkaFactory, factory
from broker.backends.kafka.settings import ConsumerOptions, KafkaSettings

__all__ = ["ConsumerOptions", "KafkaFactory", "KafkaSettings", "factory"]
