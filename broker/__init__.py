"""polybroker: one asyncio API for message brokers.

>>> import broker
>>> backend = broker.connect("inmem://demo")          # or kafka://, nats://, pubsub://, ...

Publishing goes through ``backend.publisher().topic(name)``; consuming through
``backend.messages(topic, subscription)`` (per-message ack) or ``backend.records(topics, group)``
(partitioned log). Failed handlers are retried by a :class:`RetryPolicy`
(:mod:`broker.retry`); :func:`run` runs receivers until SIGTERM and drains them.
See :mod:`broker.interfaces` for the protocols, :mod:`broker.adapt` for the
conversions between them, :mod:`broker.errors` for what can go wrong.
"""

from broker import adapt, codecs, errors
from broker.backend import Backend, BackendBase, BackendFactory, Batching
from broker.backoff import Backoff
from broker.capabilities import Capabilities
from broker.connect import available_backends, connect, register_backend
from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    BatchedMessageStream,
    BatchedReceiver,
    BatchHandler,
    Handler,
    MessageIterator,
    MessageStream,
    Publisher,
    Receiver,
    RecordIterator,
    Topic,
    TransactionalPublisher,
)
from broker.message import Acker, Committer, Message, OutboundMessage, Record, RecordBatch
from broker.retry import DeadLetterTopic, ErrorThreshold, Retrier, RetryPolicy, ThresholdEvent
from broker.run import run
from broker.settle import ack_all, commit_highest_offsets, nack_all

__version__ = "0.1.0"

__all__ = [
    "Acker",
    "Backend",
    "BackendBase",
    "BackendFactory",
    "Backoff",
    "BatchHandler",
    "BatchedIterator",
    "BatchedMessageIterator",
    "BatchedMessageStream",
    "BatchedReceiver",
    "Batching",
    "Capabilities",
    "Committer",
    "DeadLetterTopic",
    "ErrorThreshold",
    "Handler",
    "Message",
    "MessageIterator",
    "MessageStream",
    "OutboundMessage",
    "Publisher",
    "Receiver",
    "Record",
    "RecordBatch",
    "RecordIterator",
    "Retrier",
    "RetryPolicy",
    "ThresholdEvent",
    "Topic",
    "TransactionalPublisher",
    "__version__",
    "ack_all",
    "adapt",
    "available_backends",
    "codecs",
    "commit_highest_offsets",
    "connect",
    "errors",
    "nack_all",
    "register_backend",
    "run",
]
