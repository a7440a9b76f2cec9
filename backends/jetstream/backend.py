"""The NATS JetStream backend: ``nats://host:port``.

Portable names map onto JetStream like this:

=============================  ===================================================================
portable                       JetStream
=============================  ===================================================================
topic                          a subject (``orders.eu``; consumers may use wildcards, ``orders.*``)
(where a topic is stored)      a stream: ``stream=`` when given, else the stream covering the
                               subject, else a new stream named after it (``orders_eu``)
subscription                   a durable pull consumer of that stream, filtered on the subject;
                               consumers sharing the name compete for its messages
``ack_deadline``               the consumer's ``ack_wait``
max attempts                   the consumer's ``max_deliver``
group (``records``)            a durable consumer with ``AckPolicy.ALL``: committing an offset acks
                               every earlier one
offset                         the stream sequence; partition is always 0
=============================  ===================================================================
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any, ClassVar, NamedTuple

from nats.js import api

from broker import Capabilities, Message, OutboundMessage
from broker.backends.jetstream.acker import DeadLetterer, JetStreamAcker
from broker.backends.jetstream.backlog import consumer_backlog
from broker.backends.jetstream.connection import Connection
from broker.backends.jetstream.consumer import (
    JetStreamBatchedMessageIterator,
    JetStreamBatchedRecordIterator,
    JetStreamMessageIterator,
    JetStreamRecordIterator,
)
from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.mapping import parse_reply
from broker.backends.jetstream.provisioning import Provisioner, consumer_config
from broker.backends.jetstream.provisioning import not_found as _not_found
from broker.backends.jetstream.publisher import JetStreamPublishDriver, JetStreamPublisher
from broker.backends.jetstream.pull import PullEngine, Resolver, Target
from broker.backends.jetstream.registration import JetStreamFactory
from broker.backends.jetstream.settings import ConsumerOptions, JetStreamSettings, check_name, check_subject
from broker.driver.base import BackendBase, Batching, topics_tuple
from broker.driver.provision import Provision
from broker.driver.settings import describe
from broker.errors import BrokerError, ConfigError

__all__ = ["CAPABILITIES", "JetStreamBackend"]

#: The claims and their mechanisms are ``JetStreamFactory.mechanisms``: ``persistent`` with file
#: storage (the default); ``per_key_order`` for one consumer, as long as nothing is redelivered;
#: ``dead_letter`` is ``dead_letter()`` = +TERM (and republish) and ``max_deliver``; ``replay``
#: reads records from any stream sequence or time (:meth:`JetStreamBackend.replay`).
CAPABILITIES = Capabilities.claiming(
    JetStreamFactory.mechanisms,
    max_message_bytes=1024 * 1024,  # the server's default max_payload
)



class _RecordOptions(NamedTuple):
    """What ``records()`` options give: the consumer options and where a new group starts."""

    consumer: ConsumerOptions
    start_sequence: int | None
    start_time: float | None

    @property
    def batch_size(self) -> int:
        """The default batch size (the consumer options')."""
        return self.consumer.batch_size

#: Seconds an idle replay consumer lives on after its reader went away.
_REPLAY_INACTIVE = 60.0


class JetStreamBackend(BackendBase):
    """A connection to NATS JetStream; connects on first use."""

    name = "nats"
    capabilities = CAPABILITIES
    #: ``create`` (streams and durable consumers made when missing), ``verify`` (read-only
    #: checks: ``ProvisioningError``) and ``none`` (nothing made or asked beforehand):
    #: :mod:`broker.backends.jetstream.provisioning`.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: JetStreamSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or JetStreamSettings()
        self._check_provision()
        self.connection = Connection(self.settings)
        self.provisioner = Provisioner(self.connection, self.settings)
        self._dead_letter_publisher: JetStreamPublisher | None = None

    def __repr__(self) -> str:
        return f"<JetStreamBackend {describe(self.settings)['servers']} {self.connection!r}>"

    # -- publishing ----------------------------------------------------------------------------
    def publisher(self) -> JetStreamPublisher:
        """A publisher; a topic's stream is found (or created) on its first publish.

        Every publisher shares the backend's one publish driver (its PubAck inbox): asking for one
        costs no subscription, and its ``close()`` leaves the driver open for the others.
        """
        driver = self._shared_driver(
            lambda: JetStreamPublishDriver(self.connection, self.provisioner, self.settings)
        )
        return self._track(JetStreamPublisher(driver, self.settings.close_timeout))  # type: ignore[no-any-return]

    # -- per-message consumers -----------------------------------------------------------------
    def _consumer_name(self, subscription: str) -> str:
        name = subscription or self.settings.durable
        if not name:
            raise ConfigError("a subscription (the durable consumer's name) is needed")
        return check_name(name, "consumer")

    def _durable(
        self,
        topic: str,
        name: str,
        options: ConsumerOptions,
        *,
        ack_all: bool = False,
        start_sequence: int | None = None,
        start_time: float | None = None,
    ) -> Resolver:
        check_subject(topic)
        config = consumer_config(
            name, topic, options, ack_all=ack_all, start_sequence=start_sequence, start_time=start_time
        )
        provisioner = self.provisioner

        async def resolve(recheck: bool) -> Target:
            if recheck:
                provisioner.forget_stream(topic, options.stream)
            stream = await provisioner.stream_for(topic, options.stream)
            if recheck:
                provisioner.forget_consumer(stream, name)
            elif provisioner.provision == "none":
                return Target(stream, name)  # pulled from as it is; asked about only once it fails
            await provisioner.consumer(stream, name, config, options)
            return Target(stream, name)

        return resolve

    def _acker(self, engine: PullEngine, options: ConsumerOptions) -> JetStreamAcker:
        dead_letters = None
        if options.dead_letter_subject is not None:
            dead_letters = self._dead_letterer(options.dead_letter_subject, engine)
        return JetStreamAcker(lambda: engine.client, options, self.settings.request_timeout, dead_letters)

    def _dead_letterer(self, subject: str, engine: PullEngine) -> DeadLetterer:
        check_subject(subject, wildcards=False)
        id_attribute = self.settings.msg_id_attribute

        async def republish(message: Message, reason: str) -> None:
            publisher = self._dead_letter_publisher
            if publisher is None:
                publisher = self._dead_letter_publisher = self.publisher()
            target = engine.target
            source = f"{target.stream}/{target.consumer}" if target else engine.what
            attributes = dict(message.attributes)
            attributes.update(
                {
                    "dead_letter_reason": reason,
                    "dead_letter_source": source,
                    "delivery_attempts": str(message.delivery_attempt or 1),
                }
            )
            attributes.setdefault(id_attribute, f"dead-letter:{source}:{message.id}")
            await publisher.topic(subject).publish(OutboundMessage(message.data, message.key, attributes))

        return republish

    def _engine(self, resolve: Resolver, what: str, options: ConsumerOptions) -> PullEngine:
        return PullEngine(self.connection, resolve, what, options.pull_expires)

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return self.settings.consumer_options(options)

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> JetStreamMessageIterator | JetStreamBatchedMessageIterator:
        """Consume subject ``topic`` through the durable consumer ``subscription`` (made when missing).

        Options (defaults from the settings): ``ack_wait`` (or ``ack_deadline``), ``max_deliver``,
        ``max_ack_pending``, ``backoff``, ``deliver_policy``, ``prefetch``, ``pull_expires``,
        ``ack_sync``, ``dead_letter_subject``, ``stream``, ``create_consumers``, ``update_consumers``.
        A batch is one pull request.
        """
        name = self._consumer_name(subscription)
        engine = self._engine(self._durable(topic, name, options), f"{topic}/{name}", options)
        acker = self._acker(engine, options)
        if batching is None:
            return JetStreamMessageIterator(engine, acker, options.prefetch)
        return JetStreamBatchedMessageIterator(engine, acker, batching.size, batching.timeout)

    # -- records -------------------------------------------------------------------------------
    def _record_topic(self, topics: str | Sequence[str]) -> str:
        names = topics_tuple(topics)
        if len(names) != 1:
            raise ConfigError(
                "a JetStream records() consumer reads one subject; use a wildcard subject (orders.*) "
                f"for several, got {list(names)}"
            )
        return check_subject(names[0])

    def _record_options(self, options: dict[str, Any]) -> _RecordOptions:
        """The consumer options of ``records()``, and where a new group starts: ``start_sequence``
        or ``start_time`` (POSIX seconds) instead of where ``deliver_policy`` says."""
        start_sequence = options.pop("start_sequence", None)
        start_time = options.pop("start_time", None)
        return _RecordOptions(
            self.settings.consumer_options(options),
            None if start_sequence is None else int(start_sequence),
            None if start_time is None else float(start_time),
        )

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: _RecordOptions, batching: Batching | None
    ) -> JetStreamRecordIterator | JetStreamBatchedRecordIterator:
        """Read subject ``topics`` in consumer group ``group`` (an ``AckPolicy.ALL`` durable consumer).

        ``Record.ack()`` commits the record and every earlier one. Options: those of
        :meth:`messages`, ``batch_size``, ``start_sequence`` / ``start_time`` (a new group). A
        batch is one pull request.
        """
        topic = self._record_topic(topics)
        opts = options.consumer
        name = self._consumer_name(group)
        resolve = self._durable(
            topic,
            name,
            opts,
            ack_all=True,
            start_sequence=options.start_sequence,
            start_time=options.start_time,
        )
        engine = self._engine(resolve, f"{topic}/{name}", opts)
        if batching is None:
            return JetStreamRecordIterator(engine, opts.batch_size, 1.0, commits=True)
        return JetStreamBatchedRecordIterator(engine, batching.size, batching.timeout, commits=True)

    def replay(
        self,
        topic: str,
        *,
        start_sequence: int | None = None,
        start_time: float | None = None,
        batch_size: int = 0,
        batch_timeout: float = 1.0,
        **options: Any,
    ) -> JetStreamRecordIterator:
        """Read subject ``topic`` from a stream sequence (or POSIX time, or the start), in order.

        An ordered read with nothing to acknowledge: an ephemeral consumer (``AckPolicy.NONE``,
        in memory) that is made again from the next sequence when the server loses it, so the
        reader sees every stored message once, in stream order, across server restarts.
        """
        self._check_open()
        check_subject(topic)
        opts = self.settings.consumer_options(options)
        if start_sequence is not None and start_sequence < 1:
            raise ConfigError(f"start_sequence must be >= 1, got {start_sequence}")
        holder: list[JetStreamRecordIterator] = []
        provisioner = self.provisioner
        connection = self.connection

        async def resolve(recheck: bool) -> Target:
            stream = await provisioner.stream_for(topic, opts.stream)
            position = holder[0].position if holder else 0
            newest = engine.newest()
            if newest is not None:  # received, not handed out yet: carry on after it
                position = max(position, parse_reply(newest.reply).stream_seq)
            deliver = api.DeliverPolicy.ALL
            seq = None
            when = None
            if position:
                deliver, seq = api.DeliverPolicy.BY_START_SEQUENCE, position + 1
            elif start_sequence is not None:
                deliver, seq = api.DeliverPolicy.BY_START_SEQUENCE, start_sequence
            elif start_time is not None:
                import datetime

                deliver = api.DeliverPolicy.BY_START_TIME
                when = datetime.datetime.fromtimestamp(start_time, datetime.UTC)
            client = await connection.client()
            name = "replay_" + client.new_inbox().rsplit(".", 1)[-1]
            config = api.ConsumerConfig(
                name=name,
                deliver_policy=deliver,
                opt_start_seq=seq,
                opt_start_time=when,
                ack_policy=api.AckPolicy.NONE,
                filter_subject=topic,
                inactive_threshold=_REPLAY_INACTIVE,
                mem_storage=True,
                num_replicas=1,
            )
            jsm = connection.jsm
            assert jsm is not None
            try:
                await jsm.add_consumer(stream, config)
            except BrokerError:
                raise
            except Exception as exc:
                raise translate(exc, f"creating a replay consumer on {stream!r}") from exc
            return Target(stream, name)

        engine = self._engine(resolve, f"{topic} (replay)", opts)
        size = batch_size or opts.batch_size
        iterator = JetStreamRecordIterator(engine, size, batch_timeout, commits=False)
        holder.append(iterator)
        return self._track(iterator)  # type: ignore[no-any-return]

    # -- backlog -------------------------------------------------------------------------------
    async def backlog(self, topic: str, subscription: str) -> int | None:
        """``num_pending + num_ack_pending`` of the durable consumer ``subscription`` (or group).

        Looks in ``settings.stream``, else in the stream storing subject ``topic``; creates nothing
        (``UnknownTopic`` when the stream or consumer does not exist). See
        :mod:`broker.backends.jetstream.backlog`.
        """
        self._check_open()
        return await consumer_backlog(
            self.connection, topic, self._consumer_name(subscription), self.settings.stream
        )

    # -- provisioning --------------------------------------------------------------------------
    async def missing_resources(self) -> Sequence[str]:
        """Under ``provision=verify``: the missing ones of what the settings name: ``stream``, the
        durable consumer ``durable`` of it, and a stream storing ``dead_letter_subject``
        (read-only ``STREAM.INFO``, ``CONSUMER.INFO`` and ``STREAM.NAMES`` requests)."""
        s = self.settings
        await self.connection.client()
        jsm = self.connection.jsm
        assert jsm is not None
        missing: list[str] = []

        async def absent(call: Any, what: str) -> bool:
            try:
                await self.provisioner.guarded(call(), f"verifying {what}")
            except Exception as exc:
                if _not_found(exc):
                    missing.append(what)
                    return True
                raise translate(exc, f"verifying {what}") from exc
            return False

        if s.stream is not None:
            stream = s.stream
            found = not await absent(lambda: jsm.stream_info(stream), f"JetStream stream {stream!r}")
            if found and s.durable:
                durable = s.durable
                await absent(
                    lambda: jsm.consumer_info(stream, durable), f"consumer {durable!r} of stream {stream!r}"
                )
        if s.dead_letter_subject is not None:
            subject = s.dead_letter_subject
            await absent(
                lambda: jsm.find_stream_name_by_subject(subject),
                f"a JetStream stream storing subject {subject!r}",
            )
        return missing

    # -- ping ----------------------------------------------------------------------------------
    async def _ping(self, timeout: float) -> None:
        """Connect (or reuse the connection; the server checks the credentials when it connects)
        and ask the JetStream API for the account's info: an answer means JetStream is there."""
        connection = self.connection
        await connection.client(fail_fast=True)
        jsm = connection.jsm
        assert jsm is not None  # set by client()
        await connection.request_api(lambda: jsm.account_info(), "asking NATS for the JetStream account info")

    # -- closing -------------------------------------------------------------------------------
    async def _close_connection(self) -> None:
        try:
            async with asyncio.timeout(self.settings.close_timeout * 2):
                await self.connection.close()
        except TimeoutError:
            pass
