"""Streams and consumers: find them, create them when missing, check the ones that exist.

Topic -> stream: the stream named by the settings (or the ``stream=`` option) when given, else
the stream whose subjects cover the topic, else (``create_streams``) a new stream named after the
topic (``orders.eu`` -> ``orders_eu``) with the topic as its only subject. A named stream that
does not cover the topic gets it added to its subjects (``create_streams``) or the call fails
with ``UnknownTopic``. With ``create_streams=false`` and ``create_consumers=false`` nothing is
ever created or changed, for servers where the application may not manage JetStream.

``provision`` (:mod:`broker.driver.provision`) decides first: under ``create`` the two flags
above apply; under ``verify`` nothing is created or changed and a missing stream or durable
consumer is a :class:`~broker.errors.ProvisioningError` naming it (asked with the read-only
``STREAM.INFO`` / ``STREAM.NAMES`` / ``CONSUMER.INFO`` requests); under ``none`` nothing is created
and nothing asked beforehand: a named stream is taken as it is, a consumer is pulled from as it
is (asked about only when the server says it is gone), and what is missing surfaces as the
server's ``UnknownTopic``. A management request the server's permissions deny (``$JS.API.>``) is
``PermissionDenied`` at once, not a timeout.

Results are cached per backend, so each topic and consumer costs one round trip the first time.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
from collections.abc import Awaitable, Sequence
from typing import Any, TypeVar

import nats.js.errors
from nats.js import api

from broker.backends.jetstream.connection import Connection
from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.settings import ConsumerOptions, JetStreamSettings, check_name, check_subject
from broker.driver.resources import stop_task
from broker.errors import BrokerError, ConfigError, PermissionDenied, ProvisioningError, UnknownTopic

__all__ = ["Provisioner", "not_found", "stream_name_for", "subject_covers"]

_T = TypeVar("_T")

_STREAM_NAME_IN_USE = 10058
#: The pull request subjects (lower-cased, as the permission errors give them).
_PULL = "$js.api.consumer.msg.next."
_NOT_FOUND = (10059, 10014)


def stream_name_for(subject: str) -> str:
    """The name of the stream created for ``subject``: characters streams disallow become ``_``."""
    name = re.sub(r"[^A-Za-z0-9_-]", "_", subject.replace("*", "STAR").replace(">", "ALL"))
    return name[:255]


def subject_covers(pattern: str, subject: str) -> bool:
    """True when every subject matching ``subject`` also matches the stream subject ``pattern``."""
    ptokens = pattern.split(".")
    stokens = subject.split(".")
    for i, ptoken in enumerate(ptokens):
        if ptoken == ">":
            return len(stokens) > i
        if i >= len(stokens):
            return False
        stoken = stokens[i]
        if ptoken == "*":
            if stoken == ">":
                return False
            continue
        if ptoken != stoken:
            return False
    return len(ptokens) == len(stokens)


def not_found(exc: BaseException) -> bool:
    """True when ``exc`` is the JetStream API's "no such stream or consumer"."""
    return isinstance(exc, nats.js.errors.NotFoundError) or (
        isinstance(exc, nats.js.errors.APIError) and exc.err_code in _NOT_FOUND
    )


class Provisioner:
    """Finds and creates the streams and consumers of one backend (results cached)."""

    def __init__(self, connection: Connection, settings: JetStreamSettings) -> None:
        self.connection = connection
        self.settings = settings
        #: The ``provision`` mode in force (``settings.provision``).
        self.provision = settings.provision
        #: Whether missing streams may be created (and topics added to a named stream).
        self.create_streams = settings.create_streams and self.provision == "create"
        self._streams: dict[tuple[str, str | None], str] = {}
        self._consumers: dict[tuple[str, str], str] = {}
        self._locks: dict[Any, asyncio.Lock] = {}

    def _lock(self, key: Any) -> asyncio.Lock:
        lock = self._locks.get(key)
        if lock is None:
            lock = self._locks[key] = asyncio.Lock()
        return lock

    def forget_consumer(self, stream: str, consumer: str) -> None:
        """Drop a consumer from the cache (it was deleted, or the server lost it)."""
        self._consumers.pop((stream, consumer), None)

    def forget_stream(self, subject: str, stream: str | None = None) -> None:
        """Drop a topic's stream from the cache."""
        self._streams.pop((subject, stream or self.settings.stream), None)

    # -- streams ---------------------------------------------------------------------------
    async def stream_for(self, subject: str, stream: str | None = None) -> str:
        """The stream that stores ``subject`` (made or extended when allowed)."""
        stream = stream or self.settings.stream
        key = (subject, stream)
        found = self._streams.get(key)
        if found is not None:
            return found
        async with self._lock(("stream", key)):
            found = self._streams.get(key)
            if found is None:
                await self.connection.client()
                try:
                    found = await self.guarded(
                        self._resolve_stream(subject, stream), f"finding the stream for {subject!r}"
                    )
                except BrokerError:
                    raise
                except Exception as exc:
                    raise translate(exc, f"finding the JetStream stream for {subject!r}") from exc
                self._streams[key] = found
            return found

    async def guarded(self, work: Awaitable[_T], doing: str) -> _T:
        """``work`` (JetStream API requests), failed with ``PermissionDenied`` as soon as the server
        denies this user a ``$JS.API`` request meanwhile: it answers a denied publish only with an
        asynchronous error, so the request itself would wait for its timeout."""
        loop = asyncio.get_running_loop()
        denied: asyncio.Future[str] = loop.create_future()

        def listener(action: str, subject: str, detail: str) -> None:
            # a pull (``CONSUMER.MSG.NEXT``) another consumer may not make is not this request's
            management = subject.startswith("$js.api.") and not subject.startswith(_PULL)
            if action == "publish" and management and not denied.done():
                denied.set_result(subject)

        unlisten = self.connection.on_permission_denied(listener)
        task = asyncio.ensure_future(work)
        try:
            await asyncio.wait((task, denied), return_when=asyncio.FIRST_COMPLETED)
            if task.done() or not denied.done():
                return task.result()
            await stop_task(task)
            raise PermissionDenied(
                f"{doing}: the server denies this user the JetStream request {denied.result()!r} "
                "(with provision='create' the user needs the JetStream API to create streams and "
                "consumers; provision='verify' or 'none' creates nothing)"
            )
        finally:
            unlisten()
            if not task.done():
                task.cancel()
            if not denied.done():
                denied.cancel()

    def _missing(self, what: str, exc: BaseException | None = None) -> BrokerError:
        """The error for a missing stream or consumer when it may not be created."""
        if self.provision == "verify":
            return ProvisioningError("nats", [what])
        reason = "create_streams is off" if self.provision == "create" else "provision='none' creates nothing"
        return UnknownTopic(f"{what} does not exist ({reason})")

    async def _resolve_stream(self, subject: str, stream: str | None) -> str:
        jsm = self.connection.jsm
        assert jsm is not None
        create = self.create_streams
        if stream is not None:
            if self.provision == "none":
                return stream  # taken as it is: the server says so when it is not there
            try:
                info = await jsm.stream_info(stream)
            except Exception as exc:
                if not not_found(exc):
                    raise
                if not create:
                    raise self._missing(f"JetStream stream {stream!r}") from exc
                subjects = list(self.settings.subjects) or [subject]
                if not any(subject_covers(s, subject) for s in subjects):
                    subjects.append(subject)
                await self._add_stream(stream, subjects)
                return stream
            await self._cover(info, subject)
            return stream
        try:
            return await jsm.find_stream_name_by_subject(subject)
        except Exception as exc:
            if not not_found(exc):
                raise
            if not create:
                raise self._missing(f"a JetStream stream storing subject {subject!r}") from exc
        name = check_name(stream_name_for(subject), "stream")
        try:
            await self._add_stream(name, [subject])
        except nats.js.errors.APIError as exc:
            if exc.err_code != _STREAM_NAME_IN_USE:
                raise
            # A stream of that name exists for another subject (``a.b`` and ``a_b``): share it.
            await self._cover(await jsm.stream_info(name), subject)
        return name

    async def _add_stream(self, name: str, subjects: Sequence[str]) -> None:
        settings = self.settings
        jsm = self.connection.jsm
        assert jsm is not None
        config = api.StreamConfig(
            name=name,
            subjects=list(subjects),
            storage=api.StorageType.MEMORY if settings.storage == "memory" else api.StorageType.FILE,
            num_replicas=settings.replicas,
            retention=api.RetentionPolicy(settings.retention),
            duplicate_window=settings.duplicate_window,
            max_age=settings.max_age,
            max_bytes=settings.max_bytes,
        )
        await jsm.add_stream(config)

    async def _cover(self, info: api.StreamInfo, subject: str) -> None:
        subjects = list(info.config.subjects or [])
        if any(subject_covers(s, subject) for s in subjects):
            return
        name = info.config.name
        if not self.create_streams:
            if self.provision == "verify":
                raise ProvisioningError("nats", [f"subject {subject!r} in JetStream stream {name!r}"])
            raise UnknownTopic(
                f"JetStream stream {name!r} (subjects {subjects}) does not store {subject!r} "
                "(create_streams is off)"
            )
        jsm = self.connection.jsm
        assert jsm is not None
        await jsm.update_stream(info.config.evolve(subjects=[*subjects, subject]))

    # -- consumers -------------------------------------------------------------------------
    async def consumer(
        self, stream: str, name: str, config: api.ConsumerConfig, options: ConsumerOptions
    ) -> None:
        """Make sure pull consumer ``name`` of ``stream`` exists with ``config``.

        A missing consumer is created (``create_consumers``). One that exists with other
        settings is changed when ``update_consumers`` is on and raises ``ConfigError`` otherwise;
        with ``create_consumers`` off it is used as it is.
        """
        check_name(name, "consumer")
        key = (stream, name)
        wanted = json.dumps(config.as_dict(), sort_keys=True, default=str)
        if self._consumers.get(key) == wanted:
            return
        async with self._lock(("consumer", key)):
            if self._consumers.get(key) == wanted:
                return
            await self.connection.client()
            try:
                await self.guarded(
                    self._ensure_consumer(stream, name, config, options),
                    f"preparing JetStream consumer {name!r} of stream {stream!r}",
                )
            except BrokerError:
                raise
            except Exception as exc:
                raise translate(exc, f"preparing JetStream consumer {name!r} of stream {stream!r}") from exc
            self._consumers[key] = wanted

    async def _ensure_consumer(
        self, stream: str, name: str, config: api.ConsumerConfig, options: ConsumerOptions
    ) -> None:
        jsm = self.connection.jsm
        assert jsm is not None
        create = options.create_consumers and self.provision == "create"
        try:
            info: api.ConsumerInfo = await jsm.consumer_info(stream, name)
        except Exception as exc:
            if not not_found(exc):
                raise
            if not create:
                if self.provision == "verify":
                    raise ProvisioningError("nats", [f"consumer {name!r} of stream {stream!r}"]) from exc
                reason = "create_consumers is off" if self.provision == "create" else "provision='none'"
                raise UnknownTopic(
                    f"JetStream consumer {name!r} of stream {stream!r} does not exist ({reason}; {exc})"
                ) from exc
            await jsm.add_consumer(stream, config)
            return
        if info.config.deliver_subject:
            raise ConfigError(
                f"JetStream consumer {name!r} of stream {stream!r} is a push consumer; "
                "this backend consumes through pull consumers"
            )
        if not create:
            return  # used as it is
        differences = consumer_differences(info.config, config)
        if not differences:
            return
        if not options.update_consumers:
            raise ConfigError(
                f"JetStream consumer {name!r} of stream {stream!r} exists with other settings "
                f"({'; '.join(differences)}); set update_consumers=true to change it, or "
                "create_consumers=false to use it as it is"
            )
        await jsm.add_consumer(stream, config)  # create-or-update: the server applies what it may change


def consumer_differences(existing: api.ConsumerConfig, wanted: api.ConsumerConfig) -> list[str]:
    """Human-readable differences between an existing consumer's settings and the wanted ones."""
    out: list[str] = []

    def differ(field: str, have: Any, want: Any) -> None:
        if isinstance(have, float | int) and isinstance(want, float | int):
            if not math.isclose(float(have), float(want), rel_tol=1e-6, abs_tol=1e-6):
                out.append(f"{field} is {have}, wanted {want}")
        elif have != want:
            out.append(f"{field} is {have!r}, wanted {want!r}")

    differ("ack_policy", _value(existing.ack_policy), _value(wanted.ack_policy))
    differ("ack_wait", existing.ack_wait or 30.0, wanted.ack_wait or 30.0)
    differ("max_deliver", existing.max_deliver or -1, wanted.max_deliver or -1)
    have_filter = existing.filter_subject or ",".join(existing.filter_subjects or [])
    differ("filter_subject", have_filter or None, wanted.filter_subject or None)
    differ("deliver_policy", _value(existing.deliver_policy), _value(wanted.deliver_policy))
    if wanted.max_ack_pending is not None:
        differ("max_ack_pending", existing.max_ack_pending, wanted.max_ack_pending)
    if wanted.backoff:
        differ("backoff", list(existing.backoff or []), list(wanted.backoff))
    return out


def _value(value: Any) -> Any:
    return getattr(value, "value", value)


def consumer_config(
    name: str | None,
    subject: str,
    options: ConsumerOptions,
    *,
    ack_all: bool = False,
    start_sequence: int | None = None,
    start_time: float | None = None,
) -> api.ConsumerConfig:
    """The pull consumer configuration for ``options`` (durable when ``name`` is given)."""
    check_subject(subject)
    deliver = api.DeliverPolicy(options.deliver_policy)
    opt_start_seq = None
    opt_start_time = None
    if start_sequence is not None:
        deliver, opt_start_seq = api.DeliverPolicy.BY_START_SEQUENCE, start_sequence
    elif start_time is not None:
        import datetime

        deliver = api.DeliverPolicy.BY_START_TIME
        opt_start_time = datetime.datetime.fromtimestamp(start_time, datetime.UTC)
    return api.ConsumerConfig(
        name=name,
        durable_name=name,
        deliver_policy=deliver,
        opt_start_seq=opt_start_seq,
        opt_start_time=opt_start_time,
        ack_policy=api.AckPolicy.ALL if ack_all else api.AckPolicy.EXPLICIT,
        ack_wait=options.ack_wait,
        max_deliver=options.max_deliver if options.max_deliver is not None else -1,
        max_ack_pending=options.max_ack_pending,
        backoff=list(options.backoff) or None,
        filter_subject=subject,
    )
