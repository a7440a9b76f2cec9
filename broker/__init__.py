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

from typing import TYPE_CHECKING

from broker import adapt, codecs, errors
from broker.backend import Backend, Backlog, FaultInjection, Provision, QueueTracking
from broker.backoff import Backoff, FailureCounter, Jitter
from broker.capabilities import Capabilities
from broker.connect import available_backends, connect
from broker.interfaces import (
    BatchedIterator,
    BatchedMessageIterator,
    BatchedMessageStream,
    BatchedReceiver,
    BatchHandler,
    Closeable,
    DrainingReceiver,
    Handler,
    MessageIterator,
    MessageStream,
    MiddlewarePublisher,
    Publisher,
    Receiver,
    RecordIterator,
    Send,
    SendMiddleware,
    Topic,
    TransactionalPublisher,
)
from broker.message import Message, OutboundMessage, Record, RecordBatch
from broker.publish_retry import retrying_publish
from broker.retry import DeadLetterTopic, ErrorThreshold, Retrier, RetryPolicy, ThresholdEvent
from broker.run import run
from broker.settle import ack_all, commit_highest_offsets, nack_all

if TYPE_CHECKING:
    from broker.app import App

__version__ = "0.1.0"

__all__ = [
    "App",
    "Backend",
    "Backlog",
    "Backoff",
    "BatchHandler",
    "BatchedIterator",
    "BatchedMessageIterator",
    "BatchedMessageStream",
    "BatchedReceiver",
    "Capabilities",
    "Closeable",
    "DeadLetterTopic",
    "DrainingReceiver",
    "ErrorThreshold",
    "FailureCounter",
    "FaultInjection",
    "Handler",
    "Jitter",
    "Message",
    "MessageIterator",
    "MessageStream",
    "MiddlewarePublisher",
    "OutboundMessage",
    "Provision",
    "Publisher",
    "QueueTracking",
    "Receiver",
    "Record",
    "RecordBatch",
    "RecordIterator",
    "Retrier",
    "RetryPolicy",
    "Send",
    "SendMiddleware",
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
    "retrying_publish",
    "run",
]

#: Names for backend authors that moved to :mod:`broker.driver`; importable from here, with a
#: ``DeprecationWarning``, until the release named in it.
_MOVED = {
    "Acker": "broker.driver.Acker",
    "BackendBase": "broker.driver.BackendBase",
    "BackendFactory": "broker.driver.BackendFactory",
    "Batching": "broker.driver.Batching",
    "Committer": "broker.driver.Committer",
    "register_backend": "broker.driver.register_backend",
}


def __getattr__(name: str) -> object:
    if name == "App":  # imported on first use: it brings broker.typed with it
        from broker.app import App

        return App
    new = _MOVED.get(name)
    if new is None:
        raise AttributeError(f"module 'broker' has no attribute {name!r}")
    import warnings

    warnings.warn(
        f"broker.{name} moved to {new}; the old path goes in 0.3.0", DeprecationWarning, stacklevel=2
    )
    from broker import driver

    return getattr(driver, name)
