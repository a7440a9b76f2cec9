"""The RabbitMQ backend: ``rabbitmq://user:password@host:port/vhost``.

=============================  ===================================================================
portable                       RabbitMQ
=============================  ===================================================================
topic                          a durable exchange (``fanout``, or ``topic`` with the key as
                               routing key), declared by the first publish or consumer
subscription                   the durable quorum queue ``<topic>.<subscription>`` bound to it;
                               consumers of one subscription compete for its messages
``ack_deadline``               a client-side timer that returns the message to the queue
``max_attempts``               the queue's ``x-delivery-limit`` (``max_attempts - 1``)
``dead_letter_topic``          the queue's ``x-dead-letter-exchange``
``delivery_attempt``           the quorum queue's ``x-delivery-count`` + 1
=============================  ===================================================================

No ``records()``: RabbitMQ streams (its partitioned log) are out of scope for this backend.
"""

from __future__ import annotations

from typing import Any

from broker.backend import BackendBase, Batching
from broker.backends.rabbitmq.backlog import queue_backlog
from broker.backends.rabbitmq.connection import RabbitmqConnection
from broker.backends.rabbitmq.consumer import RabbitmqBatchedMessageIterator, RabbitmqMessageIterator
from broker.backends.rabbitmq.publisher import RabbitmqPublishDriver
from broker.backends.rabbitmq.registration import RabbitmqFactory
from broker.backends.rabbitmq.settings import MAX_MESSAGE_BYTES, ConsumerOptions, RabbitmqSettings
from broker.capabilities import Capabilities
from broker.publishing import DriverPublisher

__all__ = ["CAPABILITIES", "RabbitmqBackend"]

#: The claims and their mechanisms are ``RabbitmqFactory.mechanisms``: ``per_key_order`` as one
#: channel publishes in order and one queue delivers in order to one consumer; ``delayed_nack``
#: holds the message, then basic.nack(requeue); a dead consumer's channel returns its messages at
#: once, whatever ``ack_deadline``. Not ``records`` (RabbitMQ streams are out of scope), nor
#: ``backlog_for_new_subscriptions`` (an exchange drops what no queue is bound to).
CAPABILITIES = Capabilities.claiming(RabbitmqFactory.mechanisms, max_message_bytes=MAX_MESSAGE_BYTES)


class RabbitmqBackend(BackendBase):
    """A connection to RabbitMQ over AMQP 0-9-1 (aio-pika); connects on first use."""

    name = "rabbitmq"
    capabilities = CAPABILITIES
    #: A passive declare reports ready messages only: the backlog leaves out unacked ones.
    backlog_counts_in_flight = False

    def __init__(self, settings: RabbitmqSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or RabbitmqSettings()
        self.connection = RabbitmqConnection(self.settings)

    def __repr__(self) -> str:
        return f"<RabbitmqBackend {self.connection!r}>"

    def publisher(self) -> DriverPublisher:
        """A publisher (its own confirm-mode channel); a topic's exchange is declared on first publish."""
        return self._track(DriverPublisher(RabbitmqPublishDriver(self.connection)))  # type: ignore[no-any-return]

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return self.settings.consumer_options(options)

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> RabbitmqMessageIterator | RabbitmqBatchedMessageIterator:
        """Consume ``topic`` through the quorum queue of ``subscription`` (declared when entered).

        Options: ``ack_deadline``, ``max_attempts``, ``dead_letter_topic``, ``prefetch``
        (:class:`~broker.backends.rabbitmq.settings.ConsumerOptions`); batches are what was
        delivered, up to the batch size.
        """
        if batching is None:
            return RabbitmqMessageIterator(self.connection, topic, subscription, options)
        return RabbitmqBatchedMessageIterator(
            self.connection, topic, subscription, options, batching.size, batching.timeout
        )

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """The ready messages of the queue ``<topic>.<subscription>`` (not the unacked ones).

        A passive declare's ``message_count``; ``UnknownTopic`` when the queue does not exist.
        See :mod:`broker.backends.rabbitmq.backlog`.
        """
        self._check_open()
        return await queue_backlog(self.connection, topic, subscription)

    async def _close_connection(self) -> None:
        await self.connection.close()
