"""Per-message acknowledgement on plain Kafka: the marker-topic queue (kafka-mq-go's protocol).

Runs on the ``broker.log`` port only, so it works on any partitioned log (Kafka, in-memory).

* :class:`QueueService`: many logical queues on one message topic and one markers topic;
  ``producer(queue_id)``, ``consumer(queue_id)``, ``tracker()``.
* :class:`QueueConsumer`: ``receive()``; messages carry ``ack()``, ``nack(delay)``, ``in_progress()``,
  ``dead_letter()`` and ``delivery_attempt``.
* :class:`RedeliveryTracker`: redelivers messages whose START has no END by the deadline.
* :func:`open_messages`: the portable ``MessageIterator`` for ``Backend.messages()``.
"""

from broker.backends.kafka.queue.client import MqClient
from broker.backends.kafka.queue.consumer import QueueConsumer
from broker.backends.kafka.queue.errors import is_reconnect_required, is_timeout_error
from broker.backends.kafka.queue.markers import (
    BatchMarker,
    Handout,
    Marker,
    MarkerProducer,
    MarkerType,
    MessageId,
    decode,
    decode_marker,
    encode_batch_marker,
    encode_marker,
    ranges_of,
)
from broker.backends.kafka.queue.markers_queue import MarkersQueue, Started
from broker.backends.kafka.queue.metrics import QueueMetrics
from broker.backends.kafka.queue.producer import MessageSender, QueueProducer
from broker.backends.kafka.queue.service import (
    QueueBatchedMessageIterator,
    QueueMessageIterator,
    QueueService,
    open_messages,
)
from broker.backends.kafka.queue.settings import QueueSettings, RedeliveryBackoff
from broker.backends.kafka.queue.tracker import AssignedPartition, GiveUp, RedeliveryTracker

__all__ = [
    "AssignedPartition",
    "BatchMarker",
    "GiveUp",
    "Handout",
    "Marker",
    "MarkerProducer",
    "MarkerType",
    "MarkersQueue",
    "MessageId",
    "MessageSender",
    "MqClient",
    "QueueBatchedMessageIterator",
    "QueueConsumer",
    "QueueMessageIterator",
    "QueueMetrics",
    "QueueProducer",
    "QueueService",
    "QueueSettings",
    "RedeliveryBackoff",
    "RedeliveryTracker",
    "Started",
    "decode",
    "decode_marker",
    "encode_batch_marker",
    "encode_marker",
    "is_reconnect_required",
    "is_timeout_error",
    "open_messages",
    "ranges_of",
]


def __getattr__(name: str) -> object:
    """``QueueConfig``: the deprecated name of :class:`QueueSettings` (warns once per use)."""
    if name == "QueueConfig":
        import warnings

        warnings.warn(
            "broker.backends.kafka.queue.QueueConfig is deprecated: use QueueSettings",
            DeprecationWarning,
            stacklevel=2,
        )
        return QueueSettings
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
