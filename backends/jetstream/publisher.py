"""Publishing to JetStream: every publish waits for the stream's PubAck.

A publisher sends each message with a reply subject of its own inbox (``<inbox>.<n>``) and keeps
a future per message; the PubAck (or the error) that comes back resolves it. ``publish`` sends
one message and waits for its PubAck. ``batch_publish`` pipelines: it keeps up to
``publish_window`` PubAcks outstanding, waits for the oldest when the window is full, and
returns once every message is stored - the first failure is raised.

De-duplication: a message whose ``msg_id_attribute`` attribute (``Nats-Msg-Id`` by default) is
set carries it as the ``Nats-Msg-Id`` header; JetStream stores it once per
``duplicate_window``, so publishing it again - a retry after a timeout or a lost connection - is
harmless. ``publish`` retries such messages by itself (``publish_retries``); a message without
an id is never retried, because a retry could store it twice.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections import deque
from collections.abc import Callable, Sequence

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription

from broker import OutboundMessage, errors
from broker.backends.jetstream.connection import Connection
from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.mapping import encode_headers
from broker.backends.jetstream.provisioning import Provisioner
from broker.backends.jetstream.settings import JetStreamSettings, check_subject
from broker.driver.publishing import ClosingDriver, DriverPublisher, HandOver

__all__ = ["JetStreamPublishDriver", "JetStreamPublisher", "PubAckError"]

log = logging.getLogger("broker.backends.jetstream")


class PubAckError(errors.PublishError):
    """JetStream answered a publish with an error (``code`` and ``err_code`` as the server sent them)."""

    def __init__(self, message: str, code: int | None = None, err_code: int | None = None) -> None:
        super().__init__(message)
        self.code = code
        self.err_code = err_code


def _pub_ack_error(msg: Msg) -> errors.BrokerError:
    data = msg.data
    if not data:
        status = (msg.headers or {}).get("Status")
        if status == "503":
            return errors.UnknownTopic(
                "no JetStream stream stores the subject (or JetStream is not available)"
            )
        return errors.PublishError(f"the publish failed with status {status}")
    try:
        error = json.loads(data).get("error") or {}
    except ValueError:
        return errors.PublishError(f"unreadable PubAck {data[:200]!r}")
    description = error.get("description", "unknown error")
    code = error.get("code")
    err_code = error.get("err_code")
    text = f"JetStream refused the publish: {description} (code {code}, err_code {err_code})"
    if err_code == 10054 or "message size" in description.lower():
        return errors.MessageTooLarge(text)
    return PubAckError(text, code, err_code)


class JetStreamPublishDriver(ClosingDriver):
    """Publishes over the backend's shared connection; its PubAcks come to one inbox."""

    def __init__(self, connection: Connection, provisioner: Provisioner, settings: JetStreamSettings) -> None:
        self._connection = connection
        self._provisioner = provisioner
        self.settings = settings
        #: Subjects whose stream was found or made.
        self._ready: set[str] = set()
        self._pending: dict[str, asyncio.Future[bytes]] = {}
        #: Subject of each publish waiting for its PubAck (a refusal names only the subject).
        self._subjects: dict[str, str] = {}
        self._unlisten: Callable[[], None] | None = None
        self._prefix = ""
        self._prefix_len = 0
        self._sub: Subscription | None = None
        self._client: Client | None = None
        self._counter = 0
        self._lock: asyncio.Lock | None = None
        #: Sends still publishing their messages (see :class:`~broker.driver.publishing.HandOver`).
        self.hand_over = HandOver()

    def __repr__(self) -> str:
        return f"<JetStreamPublishDriver subjects={len(self._ready)} in_flight={len(self._pending)}>"

    def check_topic(self, name: str) -> None:
        """A NATS subject without wildcards (its stream is found or created on first publish)."""
        check_subject(name, wildcards=False)

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """One message: publish and wait for its PubAck (retried when it has a de-duplication id);
        more: pipelined within ``publish_window``."""
        if len(messages) == 1:
            with self.hand_over:  # a retry sends it again: nothing may overtake it until it is stored
                await self._publish_one(topic, messages[0], timeout)
        else:
            await self._publish_many(topic, messages, timeout)

    # -- plumbing ------------------------------------------------------------------------------
    async def _prepare(self, topic: str) -> Client:
        self._check_open(topic)
        client = self._client
        if client is None or client.is_closed or self._sub is None:
            if self._lock is None:
                self._lock = asyncio.Lock()
            async with self._lock:
                client = await self._connection.client()
                if self._client is not client or self._sub is None:
                    inbox = client.new_inbox()
                    try:
                        self._sub = await client.subscribe(
                            inbox + ".*", cb=self._on_ack, pending_msgs_limit=0, pending_bytes_limit=0
                        )
                    except Exception as exc:
                        raise translate(exc, "subscribing the PubAck inbox") from exc
                    self._prefix = inbox + "."
                    self._prefix_len = len(self._prefix)
                    self._client = client
                    if self._unlisten is None:
                        self._unlisten = self._connection.on_permission_denied(self._on_denied)
        if topic not in self._ready:
            if self._provisioner.provision != "none":  # none asks nothing: the PubAck says it all
                await self._provisioner.stream_for(topic)
            self._ready.add(topic)
        self._check_open(topic)
        assert self._client is not None
        return self._client

    def _on_denied(self, action: str, subject: str, detail: str) -> None:
        """The server refused a publish to ``subject`` (lower-cased): fail the publishes waiting on it."""
        if action != "publish":
            return
        for token, name in list(self._subjects.items()):
            if name.lower() == subject:
                del self._subjects[token]
                future = self._pending.pop(token, None)
                if future is not None and not future.done():
                    future.set_exception(
                        errors.PermissionDenied(
                            f"publishing to {name!r}: the server denies this user ({detail})"
                        )
                    )

    async def _on_ack(self, msg: Msg) -> None:
        token = msg.subject[self._prefix_len :]
        self._subjects.pop(token, None)
        future = self._pending.pop(token, None)
        if future is None or future.done():
            return
        data = msg.data
        if data and b'"error"' not in data:
            future.set_result(data)
        else:
            future.set_exception(_pub_ack_error(msg))

    async def _send(
        self, client: Client, subject: str, message: OutboundMessage, loop: asyncio.AbstractEventLoop
    ) -> tuple[str, asyncio.Future[bytes]]:
        data = message.data
        if type(data) is not bytes:
            data = bytes(data)
        attributes = message.attributes
        headers = (
            encode_headers(message.key, attributes, self.settings.msg_id_attribute)
            if attributes or message.key is not None
            else None
        )
        self._counter += 1
        token = str(self._counter)
        future: asyncio.Future[bytes] = loop.create_future()
        self._pending[token] = future
        self._subjects[token] = subject
        try:
            await client.publish(subject, data, reply=self._prefix + token, headers=headers)
        except Exception as exc:
            self._pending.pop(token, None)
            self._subjects.pop(token, None)
            raise translate(exc, f"publishing to {subject!r}") from exc
        return token, future

    def _abandon(self, token: str, future: asyncio.Future[bytes]) -> None:
        self._pending.pop(token, None)
        self._subjects.pop(token, None)
        if not future.done():
            future.cancel()
        elif not future.cancelled():
            future.exception()  # seen: no "exception was never retrieved" warning later

    def _has_msg_id(self, message: OutboundMessage) -> bool:
        attributes = message.attributes
        return bool(attributes) and bool(attributes.get(self.settings.msg_id_attribute))

    # -- publishing ----------------------------------------------------------------------------
    async def _publish_one(self, topic: str, message: OutboundMessage, timeout: float | None) -> None:
        client = await self._prepare(topic)
        loop = asyncio.get_running_loop()
        wait = self.settings.publish_timeout if timeout is None else timeout
        attempts = 1 + (self.settings.publish_retries if self._has_msg_id(message) else 0)
        attempt = 0
        remade = False
        while True:
            attempt += 1
            token, future = await self._send(client, topic, message, loop)
            try:
                async with asyncio.timeout(wait):
                    await future
                return
            except errors.UnknownTopic as exc:
                # Nothing was stored (no stream listens on the subject): the stream may have been
                # deleted, or lost by a server with memory storage. Make it again, once.
                self._abandon(token, future)
                if remade or not self._provisioner.create_streams:
                    exc.add_note(f"subject: {topic}")
                    raise
                remade = True
                attempt -= 1
                self._ready.discard(topic)
                self._provisioner.forget_stream(topic)
                log.info("no stream stores %r any more; making it again", topic)
                client = await self._prepare(topic)
                continue
            except TimeoutError as exc:
                self._abandon(token, future)
                if attempt == attempts:
                    raise errors.Timeout(
                        f"no PubAck for the publish to {topic!r} within {wait}s"
                        + (f" ({attempts} attempts)" if attempts > 1 else "")
                    ) from exc
            except errors.ConnectionFailed:
                self._abandon(token, future)
                if attempt == attempts:
                    raise
            except errors.BrokerError as exc:
                self._abandon(token, future)
                exc.add_note(f"subject: {topic}")
                raise
            except BaseException:
                self._abandon(token, future)
                raise
            log.info("retrying the publish of a message with a de-duplication id to %r", topic)
            client = await self._prepare(topic)

    async def _publish_many(
        self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None
    ) -> None:
        handing = self.hand_over
        handing.__enter__()  # left once every message is published, in order (before the last PubAcks)
        try:
            client = await self._prepare(topic)
        except BaseException:
            handing.__exit__()
            raise
        loop = asyncio.get_running_loop()
        window = self.settings.publish_window
        wait = self.settings.publish_timeout if timeout is None else timeout
        in_flight: deque[tuple[str, asyncio.Future[bytes]]] = deque()
        send = self._send
        subject = topic
        try:
            async with asyncio.timeout(wait):
                try:
                    for message in messages:
                        if len(in_flight) >= window:
                            await in_flight.popleft()[1]
                        in_flight.append(await send(client, subject, message, loop))
                finally:
                    handing.__exit__()
                while in_flight:
                    await in_flight[0][1]
                    in_flight.popleft()
        except TimeoutError as exc:
            raise errors.Timeout(
                f"batch publish to {subject!r}: {len(in_flight)} PubAck(s) missing after {wait}s"
            ) from exc
        except errors.BrokerError as exc:
            exc.add_note(f"subject: {subject}")
            raise
        finally:
            for token, future in in_flight:
                self._abandon(token, future)

    # -- closing -------------------------------------------------------------------------------
    async def close(self) -> None:
        """Publishes still waiting for a PubAck raise ``ClosedError``. Idempotent."""
        if not self._start_closing():
            return
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        self._subjects.clear()
        pending, self._pending = self._pending, {}
        for future in pending.values():
            if not future.done():
                future.set_exception(errors.ClosedError("the publisher was closed before the PubAck came"))
        sub, self._sub = self._sub, None
        client = self._client
        if sub is not None and client is not None and not client.is_closed:
            try:
                await sub.unsubscribe()
            except Exception as exc:
                log.debug("unsubscribing the PubAck inbox failed: %r", exc)


class JetStreamPublisher(DriverPublisher):
    """A Publisher over the backend's shared connection and its one publish driver
    (``broker.driver.publishing``).

    ``close()`` waits for this publisher's sends (up to ``close_timeout``) and leaves the driver,
    which the backend's other publishers share, open; the backend's ``close()`` closes it.
    """

    def __init__(self, driver: JetStreamPublishDriver, close_timeout: float) -> None:
        super().__init__(driver, shared=True, close_timeout=close_timeout)
