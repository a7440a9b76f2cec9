"""The Redis Streams backend: ``redis://[user:password@]host:port[/db]`` (``rediss://``: TLS).

=============================  ===================================================================
portable                       Redis
=============================  ===================================================================
topic                          a stream (created by the first publish or consumer)
subscription                   a consumer group of the stream, created by its first consumer
                               (``XGROUP CREATE ... $ MKSTREAM``: it starts at the stream's end);
                               consumers of one group compete for its entries
publish                        ``XADD <topic> *`` (a batch: one pipeline of ``XADD``)
``messages()``                 ``XREADGROUP`` as a consumer of its own in the group
``ack``                        ``XACK``
``ack_deadline``               the idle time after which ``XAUTOCLAIM`` hands an entry out again
``in_progress``                ``XCLAIM ... JUSTID`` (resets the idle time)
``nack(delay)``                ``XCLAIM ... IDLE``: claimable at once, or after ``delay``
``delivery_attempt``           the pending entry's delivery count (``XPENDING``)
``max_attempts``               deliveries after which an entry is moved to ``dead_letter_topic``
``dead_letter_topic``          a stream the entry is copied to (``XADD``) as it is acked, in a
                               ``MULTI``; the reason and source travel as ``x-dead-letter-*``
                               attributes
``records()``                  the stream as a log with one partition: ``XREAD`` from the group's
                               position; offset ``ms * 2**20 + seq`` of the entry id
group (``records``)            a consumer group whose ``last-delivered-id`` is the commit
                               (``Record.ack()``: ``XGROUP SETID``, forward only)
=============================  ===================================================================

Nothing is trimmed by default: streams keep every entry until an operator trims them, or the
opt-in ``max_length`` / ``max_age`` settings trim as entries are added (Redis trims pending entries
too: those are lost, and counted in the consumer's ``lost``). Cluster
and Sentinel are not supported: the backend talks to one server. No per-key order and no
transactions. ``records()``, its offsets, commits, replay and gaps:
:mod:`broker.backends.redis.records`.

The backend holds one redis-py asyncio client (a connection pool), made on first use; the
publisher and the consumers share it, and every blocked read holds one connection of the pool.
"""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Sequence
from typing import Any, ClassVar

from redis.asyncio import Redis, SSLConnection
from redis.asyncio.retry import Retry
from redis.backoff import ExponentialBackoff
from redis.exceptions import ConnectionError as RedisConnectionError

from broker import Capabilities, OutboundMessage
from broker.backends.redis.consumer import (
    RedisBatchedMessageIterator,
    RedisMessageIterator,
    stream_resource,
)
from broker.backends.redis.errors import translate
from broker.backends.redis.mapping import to_pairs
from broker.backends.redis.records import RedisBatchedRecordIterator, RedisRecordIterator
from broker.backends.redis.registration import RedisFactory
from broker.backends.redis.settings import (
    MAX_MESSAGE_BYTES,
    ConsumerOptions,
    RecordOptions,
    RedisSettings,
    check_name,
)
from broker.driver.base import BackendBase, Batching
from broker.driver.clock import clock
from broker.driver.provision import Provision
from broker.driver.publishing import DriverPublisher
from broker.errors import ClosedError, ConfigError, ProvisioningError, PublishError, Timeout, UnknownTopic

__all__ = ["CAPABILITIES", "RedisBackend", "RedisConnection", "RedisPublishDriver", "TlsConnection"]

#: The claims and their mechanisms are ``RedisFactory.mechanisms``. Not ``per_key_order`` (the
#: consumers of a group share its entries with no regard to keys, and a claimed entry comes back
#: after later ones), nor ``backlog_for_new_subscriptions`` (a new subscription's group starts at
#: the end of its stream; a new ``records()`` group starts at its beginning by default).
CAPABILITIES = Capabilities.claiming(RedisFactory.mechanisms, max_message_bytes=MAX_MESSAGE_BYTES)


class RedisConnection:
    """The backend's redis-py client, made on first use, closed once."""

    def __init__(self, settings: RedisSettings) -> None:
        self.settings = settings
        self._client: Redis | None = None
        self._publishing: Redis | None = None
        self._closed = False

    def __repr__(self) -> str:
        s = self.settings
        return f"<RedisConnection {s.host}:{s.port}/{s.db}{' tls' if s.uses_tls else ''}>"

    def client(self) -> Redis:
        """The client (its pool connects on first command)."""
        if self._closed:
            raise ClosedError("the Redis connection is closed")
        if self._client is None:
            # a blocking read waits poll_interval on the server, then its answer comes
            self._client = self._make(self.settings.command_timeout + self.settings.poll_interval)
        return self._client

    def publishing_client(self) -> Redis:
        """The publishers' client, which the consumers' acks share: a pool of its own without a
        socket timeout, because every publish runs under ``publish_timeout`` (or its
        ``timeout=``) and every ack under ``command_timeout`` already, and redis-py would otherwise
        start a timer for each reply of a pipeline and run each send as a task of its own."""
        if self._closed:
            raise ClosedError("the Redis connection is closed")
        if self._publishing is None:
            self._publishing = self._make(None)
        return self._publishing

    def _make(self, socket_timeout: float | None) -> Redis:
        """A redis-py client of these settings whose commands wait ``socket_timeout`` at most."""
        s = self.settings
        tls: dict[str, Any] = {}
        if s.uses_tls:
            # verifies the chain and the host name: never turned off
            tls = {
                "ssl": True,
                "ssl_ca_certs": s.tls_ca_file,
                "ssl_certfile": s.tls_cert_file,
                "ssl_keyfile": s.tls_key_file,
                "ssl_cert_reqs": "required",
                "ssl_check_hostname": True,
            }
        client = Redis(
            host=s.host,
            port=s.port,
            db=s.db,
            username=s.user,
            password=s.password,
            socket_connect_timeout=s.connect_timeout,
            socket_timeout=socket_timeout,
            # one retry on a broken pooled connection (a restarted server), quickly
            retry=Retry(ExponentialBackoff(cap=0.5, base=0.05), 1),
            max_connections=s.max_connections,
            client_name=s.client_name,
            decode_responses=False,
            **tls,
        )
        if s.uses_tls:
            client.connection_pool.connection_class = TlsConnection
        return client

    async def close(self) -> None:
        """Close the clients' connections (idempotent)."""
        self._closed = True
        clients = [c for c in (self._client, self._publishing) if c is not None]
        self._client = self._publishing = None
        for client in clients:
            try:
                async with asyncio.timeout(self.settings.close_timeout):
                    await client.aclose()
            except (Exception, TimeoutError):
                pass


class TlsConnection(SSLConnection):
    """redis-py's TLS connection, whose first exchange, when the server drops the connection instead,
    says why that may be: a server with ``tls-auth-clients yes`` refuses a client certificate it does
    not trust, or none, after the handshake (TLS 1.3), so the client sees only an alert or a reset on
    its first write or read."""

    _answered = False

    def _why(self, exc: RedisConnectionError) -> RedisConnectionError:
        which = (
            "the client certificate given" if self.certfile else "a connection without a client certificate"
        )
        return RedisConnectionError(
            f"{exc} (before the server's first answer: a Redis server that requires client "
            f"certificates refuses {which} so; mutual TLS needs tls_cert_file and tls_key_file "
            "with a certificate the server trusts)"
        )

    async def on_connect_check_health(self, check_health: bool = True) -> None:
        """Log in on a new (or re-made) connection, which has had no answer yet."""
        self._answered = False
        await super().on_connect_check_health(check_health)

    async def send_packed_command(self, *args: Any, **kwargs: Any) -> None:
        """Send a command; a connection error before the first answer names mutual TLS."""
        try:
            await super().send_packed_command(*args, **kwargs)
        except RedisConnectionError as exc:
            if self._answered:
                raise
            raise self._why(exc) from exc

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        """The server's answer; a connection error before the first one names mutual TLS."""
        try:
            answer = await super().read_response(*args, **kwargs)
        except RedisConnectionError as exc:
            if self._answered:
                raise
            raise self._why(exc) from exc
        self._answered = True
        return answer


class RedisBackend(BackendBase):
    """A connection to one Redis server (redis-py asyncio); connects on first use."""

    name = "redis"
    capabilities = CAPABILITIES
    #: The backend counts delivered entries not acked yet (``pending``) with the unread ones.
    backlog_counts_in_flight = True
    #: ``create`` (``XADD``, ``XGROUP CREATE ... MKSTREAM``), ``verify`` and ``none`` (``XADD
    #: ... NOMKSTREAM``, no group created): :mod:`broker.driver.provision`.
    provision_modes: ClassVar[tuple[Provision, ...]] = ("create", "verify", "none")

    def __init__(self, settings: RedisSettings | None = None) -> None:
        super().__init__()
        self.settings = settings or RedisSettings()
        self._check_provision()
        self.connection = RedisConnection(self.settings)

    def __repr__(self) -> str:
        return f"<RedisBackend {self.connection!r}>"

    def publisher(self) -> DriverPublisher:
        """A publisher over the backend's one publish driver (it shares the backend's client)."""
        driver = self._shared_driver(lambda: RedisPublishDriver(self.connection))
        publisher = DriverPublisher(driver, shared=True, close_timeout=self.settings.close_timeout)
        return self._track(publisher)  # type: ignore[no-any-return]

    def _consumer_options(self, options: dict[str, Any]) -> ConsumerOptions:
        return self.settings.consumer_options(options)

    def _open_messages(
        self, topic: str, subscription: str, options: ConsumerOptions, batching: Batching | None
    ) -> RedisMessageIterator | RedisBatchedMessageIterator:
        """Consume ``topic`` (a stream) as a new consumer of the group ``subscription`` (created
        when entered or on the first read).

        Options: ``ack_deadline``, ``max_attempts``, ``dead_letter_topic``, ``poll_interval``, ``start``
        (:class:`~broker.backends.redis.settings.ConsumerOptions`).
        """
        check_name(topic, "topic (stream)")
        check_name(subscription, "subscription (consumer group)")
        client = self.connection.client()
        acks = self.connection.publishing_client()  # no socket timeout: see RedisAcker
        if batching is None:
            return RedisMessageIterator(client, self.settings, topic, subscription, options, acks)
        return RedisBatchedMessageIterator(
            client, self.settings, topic, subscription, options, batching.size, batching.timeout, acks
        )

    def _record_options(self, options: dict[str, Any]) -> RecordOptions:
        return self.settings.record_options(options)

    def _open_records(
        self, topics: tuple[str, ...], group: str, options: RecordOptions, batching: Batching | None
    ) -> RedisRecordIterator | RedisBatchedRecordIterator:
        """Read the stream ``topics`` (one) as a one-partition log in the group ``group`` (a consumer
        group whose position is the commit: :mod:`broker.backends.redis.records`).

        Options: ``poll_interval``, ``batch_size``, ``start`` (``earliest`` or ``latest``, for a new
        group), ``start_offset`` or ``start_time`` (:class:`~broker.backends.redis.settings.RecordOptions`).
        """
        if len(topics) != 1:
            raise ConfigError(
                f"a Redis records() reader reads one stream (a log with one partition), got {list(topics)}"
            )
        topic = check_name(topics[0], "topic (stream)")
        check_name(group, "group (consumer group)")
        client = self.connection.client()
        if batching is None:
            return RedisRecordIterator(client, self.settings, topic, group, options)
        options = dataclasses.replace(options, batch_size=batching.size)
        return RedisBatchedRecordIterator(
            client, self.settings, topic, group, options, batching.size, batching.timeout
        )

    async def backlog(self, topic: str, subscription: str) -> int | None:
        """Entries of ``topic`` the group ``subscription`` has not acked: its ``lag`` (not read yet)
        plus its ``pending`` ones (``XINFO GROUPS``). None when the server cannot say the lag
        (entries were deleted from the middle of the stream); ``UnknownTopic`` without the group."""
        self._check_open()
        client = self.connection.client()
        doing = f"reading the backlog of group {subscription!r} of stream {topic!r}"
        try:
            groups = await client.xinfo_groups(topic)
        except Exception as exc:
            if "no such key" in str(exc).lower():
                raise UnknownTopic(f"{doing}: no stream {topic!r}") from exc
            raise translate(exc, doing) from exc
        for group in groups:
            name = group.get("name")
            if (name.decode() if isinstance(name, bytes) else name) == subscription:
                lag = group.get("lag")
                if lag is None:
                    return None
                return int(lag) + int(group.get("pending") or 0)
        raise UnknownTopic(f"{doing}: no such group")

    async def missing_resources(self) -> Sequence[str]:
        """The dead-letter stream the settings name, when it does not exist (``EXISTS``)."""
        letters = self.settings.dead_letter_topic
        if letters is None:
            return ()
        try:
            exists = await self.connection.client().exists(letters)
        except Exception as exc:
            raise translate(exc, f"verifying stream {letters!r}") from exc
        return () if exists else (stream_resource(letters),)

    async def _ping(self, timeout: float) -> None:
        """``PING``: answered only to a client the server let in."""
        try:
            async with asyncio.timeout(timeout):
                await self.connection.client().ping()
        except TimeoutError as exc:
            raise Timeout(f"pinging Redis at {self.settings.host}:{self.settings.port}: no answer") from exc
        except Exception as exc:
            raise translate(exc, f"pinging Redis at {self.settings.host}:{self.settings.port}") from exc

    async def _close_connection(self) -> None:
        await self.connection.close()


class RedisPublishDriver:
    """A ``broker.driver.publishing.PublishDriver``: ``XADD`` on the backend's client."""

    def __init__(self, connection: RedisConnection) -> None:
        self._connection = connection
        self._settings = connection.settings
        #: ``XADD ... NOMKSTREAM`` unless the backend may create streams.
        self._nomk = connection.settings.provision != "create"

    def check_topic(self, name: str) -> None:
        """Refuse names that cannot name a stream."""
        check_name(name, "topic (stream)")

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """``XADD`` every message (one pipeline for a batch); return once the server added them all.

        The commands go through redis-py's ``execute_command`` with every argument already bytes
        (the fields of :func:`~broker.backends.redis.mapping.to_pairs`), which redis-py packs as
        they are; its reply to ``XADD`` is the entry id (None: ``NOMKSTREAM`` found no stream).
        """
        doing = f"publishing to {topic!r}"
        client = self._connection.publishing_client()
        head = self._head(topic)
        try:
            async with asyncio.timeout(self._settings.publish_timeout if timeout is None else timeout):
                if len(messages) == 1:
                    ids = [await client.execute_command(*head, *to_pairs(messages[0]))]  # type: ignore[no-untyped-call]
                else:
                    pipeline = client.pipeline(transaction=False)
                    command = pipeline.execute_command
                    for message in messages:
                        command(*head, *to_pairs(message))
                    ids = await pipeline.execute()
        except TimeoutError as exc:
            raise Timeout(f"{doing}: no answer from the server in time") from exc
        except Exception as exc:
            raise translate(exc, doing, PublishError) from exc
        if self._nomk and any(entry_id is None for entry_id in ids):  # NOMKSTREAM: no stream, no entry
            if self._settings.provision == "verify":
                raise ProvisioningError("redis", [stream_resource(topic)])
            raise UnknownTopic(f"{doing}: no stream {topic!r} (provision='none' creates none)")

    def _head(self, topic: str) -> tuple[bytes, ...]:
        """``XADD <topic> [NOMKSTREAM] [<trimming>] *``: what comes before the fields, as bytes."""
        head = [b"XADD", topic.encode()]
        if self._nomk:
            head.append(b"NOMKSTREAM")
        s = self._settings
        # the opt-in retention settings (nothing is trimmed by default)
        if s.max_length is not None:
            head += (b"MAXLEN", b"~", b"%d" % s.max_length)
        elif s.max_age is not None:
            head += (b"MINID", b"~", b"%d-0" % max(0, int((clock.time() - s.max_age) * 1000)))
        head.append(b"*")
        return tuple(head)

    async def close(self) -> None:
        """Nothing of its own to release: the client is the backend's."""
