"""Per-message acknowledgement on plain Kafka: the marker-topic queue (kafka-mq-go's protocol).

Runs on the ``broker.log`` port only, so it works on any partitioned log (Kafka, in-memory).

* :class:`QueueService`: many logical queues on one message topic and one markers topic;
  ``producer(queue_id)``, ``consumer(queue_id)``, ``tracker()``.
* :class:`Consumer`: ``receive()``; messages carry ``ack()``, ``nack(delay)``, ``in_progress()``,
  ``dead_letter()`` and ``delivery_attempt``.
* :class:`RedeliveryTracker`: redelivers messages whose START has no END by the deadline.
* :func:`open_messages`: the portable ``MessageIterator`` for ``Backend.messages()``.
"""

from backends.kafka.queue.client import MqClient
from backends.kafka.queue.config import QueueConfig
from backends.kafka.queue.consumer import Consumer
from backends.kafka.queue.markers import (
    BatchMarker,
    Handout,
    Marker,
    MarkerType,
    MessageId,
    decode,
    decode_marker,
    encode_batch_marker,
    encode_marker,
    ranges_of,
)
from backends.kafka.queue.markers_queue import MarkersQueue, Started
from backends.kafka.queue.metrics import QueueMetrics
from backends.kafka.queue.producer import MarkerProducer, MessageSender, Producer
from backends.kafka.queue.service import (
    QueueBatchedMessageIterator,
    QueueMessageIterator,
    QueueService,
    open_messages,
)
from backends.kafka.queue.tracker import AssignedPartition, RedeliveryTracker

__all__ = [
    "AssignedPartition",
    "BatchMarker",
    "Consumer",
    "Handout",
    "Marker",
    "MarkerProducer",
    "MarkerType",
    "MarkersQueue",
    "MessageId",
    "MessageSender",
    "MqClient",
    "Producer",
    "QueueBatchedMessageIterator",
    "QueueConfig",
    "QueueMessageIterator",
    "QueueMetrics",
    "QueueService",
    "RedeliveryTracker",
    "Started",
    "decode",
    "decode_marker",
    "encode_batch_marker",
    "encode_marker",
    "open_messages",
    "ranges_of",
]
