"""Kafka helpers in the spirit of kefka: thin, Kafka-specific, on top of confluent-kafka.

* :class:`Producer`: key and value codecs (``str``, ``json``, ``msgpack``, ``bytes`` or any
  ``broker.codecs.Codec``), ``produce`` / ``produce_message`` (enqueue), ``sync_produce`` /
  ``sync_produce_message`` (wait for the delivery report; a timeout stops the wait, not the
  delivery), ``flush`` and ``flush_all`` (returns once the queue is empty).
* :class:`Consumer`: a consumer-group member running ``handler(message, commit)``, where
  ``await commit()`` commits that message's offset; ``lag()``. With ``enable.auto.commit`` on,
  a message's offset is stored once its handler returns and librdkafka commits it (kefka's "commit
  can be ignored").
* :class:`Reader`: reads partitions outside any group from ``FIRST_OFFSET``, ``LAST_OFFSET`` or an
  explicit offset, with a partition-EOF callback and ``watermarks()``.
* :func:`lag` and :func:`message_count` (and :class:`MetadataClient`, made from a config or from a
  consumer, whose ``assignment()`` and group ``lag()`` then need no group name).
* Over the application's own confluent-kafka clients (kefka's package functions):
  :func:`flush_all`, :func:`sync_produce`, :func:`sync_produce_message` on a ``Producer`` and
  :func:`consume` on a subscribed ``Consumer``.
* Errors: ``error_callback`` sees handler failures and transient polling and reading errors, and
  consuming goes on (kefka's ``ErrorCallback``); only a fatal librdkafka error ends a loop.
* Logging: every helper takes ``logger=`` (a standard ``logging.Logger`` or adapter; default
  ``broker.backends.kafka.client``), which also receives librdkafka's own log lines.

Nothing is forced: the helpers' defaults sit under the caller's librdkafka config, which wins.
Handlers get confluent-kafka ``Message`` objects; values are raw bytes (decode them with the
codec of your choice, e.g. ``JsonCodec().decode(message.value())``).
"""

from broker.backends.kafka.client.codecs import resolve_codec
from broker.backends.kafka.client.consumer import Commit, Consumer, ErrorCallback, MessageHandler
from broker.backends.kafka.client.metadata import MetadataClient, lag, message_count
from broker.backends.kafka.client.own import consume, flush_all, sync_produce, sync_produce_message
from broker.backends.kafka.client.producer import DeliveryCallback, DeliveryReport, Producer
from broker.backends.kafka.client.reader import (
    FIRST_OFFSET,
    LAST_OFFSET,
    PartitionEOFCallback,
    Reader,
    Watermarks,
    read_topic_partitions,
)

__all__ = [
    "FIRST_OFFSET",
    "LAST_OFFSET",
    "Commit",
    "Consumer",
    "DeliveryCallback",
    "DeliveryReport",
    "ErrorCallback",
    "MessageHandler",
    "MetadataClient",
    "PartitionEOFCallback",
    "Producer",
    "Reader",
    "Watermarks",
    "consume",
    "flush_all",
    "lag",
    "message_count",
    "read_topic_partitions",
    "resolve_codec",
    "sync_produce",
    "sync_produce_message",
]
