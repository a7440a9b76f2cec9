"""Adapters between the consumption styles, written once for every backend.

==========================================  ==============================================
lib-brokers adapter                         here
==========================================  ==============================================
iterator -> batched iterator                :func:`batched_messages`, :func:`batched_records`
iterator -> stream                          :func:`message_stream`, :func:`record_stream`
batched iterator -> stream                  :func:`message_stream_from_batches`
batched iterator -> batched stream          :func:`batched_message_stream`, :func:`record_batch_stream`
stream -> batched stream                    :func:`batch_stream`
receiver -> stream                          :func:`stream_from_receiver`
(batched) iterator -> receiver              :func:`receiver`, :func:`receiver_from_batches`
batched stream/iterator -> batched receiver :func:`batched_receiver`
fan-in of receivers                         :func:`fan_in`
parallel publish                            :func:`publish_concurrently`
group a batch                               :func:`group_by`, :func:`group_by_key`
settle many                                 :func:`ack_all`, :func:`nack_all`, :func:`commit_highest_offsets`
==========================================  ==============================================

The receivers take ``retry=`` (a :class:`broker.RetryPolicy`: backoff, dead letters, ordered retries,
an error threshold) and ``drain_timeout=``; ``receiver.stop()`` drains them gracefully.
"""

from broker.adapt.batching import batched_messages, batched_records
from broker.adapt.grouping import group_by, group_by_key
from broker.adapt.publishing import publish_concurrently
from broker.adapt.receivers import batched_receiver, fan_in, receiver, receiver_from_batches
from broker.adapt.streams import (
    Stream,
    batch_stream,
    batched_message_stream,
    message_stream,
    message_stream_from_batches,
    record_batch_stream,
    record_stream,
    stream_from_receiver,
)
from broker.settle import ack_all, commit_highest_offsets, nack_all

__all__ = [
    "Stream",
    "ack_all",
    "batch_stream",
    "batched_message_stream",
    "batched_messages",
    "batched_receiver",
    "batched_records",
    "commit_highest_offsets",
    "fan_in",
    "group_by",
    "group_by_key",
    "message_stream",
    "message_stream_from_batches",
    "nack_all",
    "publish_concurrently",
    "receiver",
    "receiver_from_batches",
    "record_batch_stream",
    "record_stream",
    "stream_from_receiver",
]
