"""The RabbitMQ backend: ``rabbitmq://user:password@host:port/vhost``.

=============================  ===================================================================
portable                       RabbitMQ
=============================  ===================================================================
topic                          a durable exchange (``fanout``; ``topic`` or ``direct`` with the
                               key as routing key; ``headers`` matching attributes), declared
                               by the first publish or consumer
subscription                   the durable quorum queue ``<topic>.<subscription>`` bound to it
                               (or an existing queue named with ``queue=``); consumers of one
                               subscription compete for its messages
``ack_deadline``               a client-side timer that returns the message to the queue
``max_attempts``               the queue's ``x-delivery-limit`` (``max_attempts - 1``)
``dead_letter_topic``          the queue's ``x-dead-letter-exchange``
``delivery_attempt``           the quorum queue's ``x-delivery-count`` + 1 (a classic queue: 2 on
                               any redelivery, a lower bound)
=============================  ===================================================================

``provision`` (:mod:`broker.backends.rabbitmq.provisioning`): ``create`` declares exchanges, queues
and bindings; ``verify`` declares nothing and checks each exchange and queue with a passive declare
on a throwaway channel; ``none`` declares and checks nothing (the broker's ``404`` is ``UnknownTopic``).

No ``records()``: RabbitMQ streams (its partitioned log) are out of scope for this backend.

The backend holds one AMQP connection (aio-pika's robust connection: it reconnects by itself),
opened on first use; the publisher and every consumer open their own channel on it, so a channel
error (an exchange or queue declared with other settings) closes only the channel that caused it.

Publishing: every topic is a durable exchange, declared on its first publish (publishing to a
topic nobody subscribed to yet succeeds; the broker drops what no queue is bound to). The channel
runs in publisher-confirm mode: ``send`` returns once the broker confirmed every message. A batch
is written in one go and its confirms are awaited together.

Backlog: a passive ``queue.declare`` answers with the queue's ``message_count``, the messages ready
for delivery. Messages delivered and not acked yet are not in it (AMQP 0-9-1 does not report them;
the management plugin's HTTP API does, and is not used), nor are those a consumer holds back for a
delayed nack.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl
from collections.abc import Sequence
from typing import Any, ClassVar

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractRobustConnection

from broker import Capabilities, OutboundMessage
from broker.backends.rabbitmq import RabbitmqFactory
from broker.backends.rabbitmq.consumer import RabbitmqBatchedMessageIterator, RabbitmqMessageIterator
from broker.backends.rabbitmq.mapping import (
    close_quietly,
    connect_error,
    declare_exchange,
    routing_key,
    to_sdk,
    translate,
)
from broker.backends.rabbitmq.provisioning import Entity, missing_entities
from broker.backends.rabbitmq.settings import (
    MAX_MESSAGE_BYTES,
    ConsumerOptions,
    RabbitmqSettings,
    check_name,
    queue_name,
)
from broker.driver.base import BackendBase, Batching
from broker.driver.provision import Provision
from broker.driver.publishing import DriverPublisher
from broker.errors import (
    ClosedError,
    ConnectionFailed,
    ProvisioningError,
    PublishError,
    Timeout,
    UnknownTopic,
)

__all__ = [
    "CAPABILITIES",
    "RabbitmqBackend",
    "RabbitmqConnection",
    "RabbitmqPublishDriver",
    "queue_backlog",
]

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
    #: ``create`` (declare exchanges, queues, bindings), ``verify`` (passive declares only) and
    #: ``none`` (nothing declared or checked): :mod:`broker.backends.rabbitmq.provisioning`.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: RabbitmqSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or RabbitmqSettings()
        self._check_provision()
        self.connection = RabbitmqConnection(self.settings)

    def __repr__(self) -> str:
        return f"<RabbitmqBackend {self.connection!r}>"

    def publisher(self) -> DriverPublisher:
        """A publisher on the backend's one confirm-mode publishing channel, shared by every
        publisher (asking for one opens no channel); a topic's exchange is declared on first publish."""
        driver = self._shared_driver(lambda: RabbitmqPublishDriver(self.connection))
        publisher = DriverPublisher(driver, shared=True, close_timeout=self.settings.close_timeout)
        return self._track(publisher)  # type: ignore[no-any-return]

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
        See :func:`queue_backlog`.
        """
        self._check_open()
        return await queue_backlog(self.connection, topic, subscription)

    async def missing_resources(self) -> Sequence[str]:
        """Under ``provision=verify``: the missing ones of the ``dead_letter_topic`` exchange the
        settings name and of every exchange and queue the publishers and consumers checked so far
        (each asked with a passive declare on a throwaway channel)."""
        entities: list[Entity] = sorted(self.connection.verified)
        if self.settings.dead_letter_topic is not None:
            entities.insert(0, ("exchange", self.settings.dead_letter_topic))
        return await missing_entities(self.connection.channel, entities, self.settings.close_timeout)

    async def _ping(self, timeout: float) -> None:
        """Open (or reuse) the connection, which logs in, and open and close a channel on it: a
        round trip the broker answers only to a client it let in."""
        channel = await self.connection.channel()
        await close_quietly(channel, min(timeout, self.settings.close_timeout))

    async def _close_connection(self) -> None:
        await self.connection.close()


class RabbitmqConnection:
    """A lazily opened robust connection with channels on demand."""

    def __init__(self, settings: RabbitmqSettings) -> None:
        self.settings = settings
        #: The ``provision`` mode in force (``settings.provision``): who may declare what.
        self.provision: Provision = settings.provision
        #: Under ``provision=verify``: every exchange and queue a publisher or consumer checked
        #: (and uses); ``ping()`` checks them again.
        self.verified: set[Entity] = set()
        self._connection: AbstractRobustConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        s = self.settings
        return f"<RabbitmqConnection {s.host}:{s.port} vhost={s.vhost!r}>"

    def _ssl_context(self) -> ssl.SSLContext | None:
        s = self.settings
        if not s.uses_tls:
            return None
        # verifies the chain and the host name (check_hostname, CERT_REQUIRED): never turned off
        context = ssl.create_default_context(cafile=s.tls_ca_file)
        if s.tls_cert_file:
            context.load_cert_chain(s.tls_cert_file, s.tls_key_file, password=s.tls_key_password)
        return context

    async def connection(self) -> AbstractRobustConnection:
        """The open connection (connecting on first use)."""
        if self._closed:
            raise ClosedError("the RabbitMQ connection is closed")
        if self._connection is not None:
            return self._connection
        async with self._lock:
            if self._connection is None:
                s = self.settings
                properties: dict[str, aio_pika.abc.FieldValue] = {}
                if s.name:
                    properties["connection_name"] = s.name
                context = self._ssl_context()
                try:
                    self._connection = await asyncio.wait_for(
                        aio_pika.connect_robust(
                            host=s.host,
                            port=s.port,
                            login=s.user,
                            password=s.password,
                            virtualhost=s.vhost,
                            ssl=context is not None,
                            ssl_context=context,
                            timeout=s.connect_timeout,
                            client_properties=properties,
                            heartbeat=s.heartbeat,
                            auth=s.auth_mechanism if s.auth_mechanism != "plain" else None,
                        ),
                        s.connect_timeout,
                    )
                except Exception as exc:
                    doing = f"connecting to RabbitMQ at {s.host}:{s.port}"
                    raise connect_error(exc, doing, s) from exc
        return self._connection

    async def channel(self, *, confirms: bool = False, prefetch: int | None = None) -> AbstractChannel:
        """A new channel (with publisher confirms, or with a prefetch count for a consumer)."""
        connection = await self.connection()
        try:
            channel = await connection.channel(publisher_confirms=confirms)
            if prefetch is not None:
                await channel.set_qos(prefetch_count=prefetch)
        except Exception as exc:
            raise translate(exc, "opening a RabbitMQ channel", ConnectionFailed) from exc
        return channel

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(connection.close(), self.settings.close_timeout)


class RabbitmqPublishDriver:
    """A ``broker.driver.publishing.PublishDriver`` on one confirm-mode channel."""

    def __init__(self, connection: RabbitmqConnection) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._lock = asyncio.Lock()

    def check_topic(self, name: str) -> None:
        """Refuse names RabbitMQ does not take for an exchange."""
        check_name(name, "topic (exchange)")

    async def _exchange(self, topic: str) -> AbstractExchange:
        """The topic's exchange: declared (``provision=create``), checked passively on a
        throwaway channel (``verify``: ``ProvisioningError`` when missing) or taken as it is
        (``none``: a missing one is the broker's ``404``, ``UnknownTopic``)."""
        channel = self._channel
        exchange = self._exchanges.get(topic)
        if exchange is not None and channel is not None and not channel.is_closed:
            return exchange
        async with self._lock:
            if self._channel is None or self._channel.is_closed:  # a channel error closed it: start over
                self._exchanges.clear()
                self._channel = await self._connection.channel(confirms=True)
            exchange = self._exchanges.get(topic)
            if exchange is None:
                provision = self._connection.provision
                if provision == "create":
                    exchange = await declare_exchange(self._channel, topic, self._settings)
                else:
                    if provision == "verify":
                        entity: Entity = ("exchange", topic)
                        missing = await missing_entities(
                            self._connection.channel, [entity], self._settings.close_timeout
                        )
                        self._connection.verified.add(entity)
                        if missing:
                            raise ProvisioningError("rabbitmq", missing)
                    exchange = await self._channel.get_exchange(topic, ensure=False)
                self._exchanges[topic] = exchange
            return exchange

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Publish ``messages`` to the topic's exchange; return once the broker confirmed them all."""
        settings = self._settings
        kind, persistent = settings.exchange_kind(topic), settings.persistent
        doing = f"publishing to {topic!r}"
        try:
            async with asyncio.timeout(settings.publish_timeout if timeout is None else timeout):
                exchange = await self._exchange(topic)
                publishes = [
                    exchange.publish(to_sdk(m, persistent), routing_key(m, kind), mandatory=False)
                    for m in messages
                ]
                await (publishes[0] if len(publishes) == 1 else asyncio.gather(*publishes))
        except TimeoutError as exc:
            raise Timeout(f"{doing}: no confirm from the broker in time") from exc
        except ProvisioningError:
            raise
        except Exception as exc:
            error = translate(exc, doing, PublishError)
            if isinstance(error, UnknownTopic):
                error = UnknownTopic(f"{doing}: no exchange {topic!r} ({error})")
            raise error from exc

    async def close(self) -> None:
        """Close the channel (every publish has been confirmed by then)."""
        channel, self._channel = self._channel, None
        self._exchanges.clear()
        await close_quietly(channel, self._settings.close_timeout)


async def queue_backlog(connection: RabbitmqConnection, topic: str, subscription: str) -> int:
    """The ready messages of the queue of ``subscription`` (``UnknownTopic`` when it does not exist).

    Declares nothing: a passive declare on a channel of its own (a missing queue closes it).
    """
    name = queue_name(topic, subscription)
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(name, passive=True)
        count = queue.declaration_result.message_count
    except Exception as exc:
        raise translate(exc, f"reading the backlog of queue {name!r}") from exc
    finally:
        await close_quietly(channel, connection.settings.close_timeout)
    return int(count or 0)
