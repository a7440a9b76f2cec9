"""The one NATS connection a backend shares between its publishers and consumers.

``broker.connect`` is synchronous, so the connection is opened lazily, on the first call that
needs it, inside the running event loop. nats-py reconnects by itself after the connection
drops (``max_reconnect_attempts``, ``reconnect_wait``); consumers register a listener to learn
about reconnections, because pull requests waiting at a restarted server are gone.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import logging
import re
import ssl
from collections.abc import Awaitable, Callable
from typing import Any

import nats
import nats.errors
from nats.aio.client import Client
from nats.js import JetStreamContext, JetStreamManager

from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.settings import JetStreamSettings
from broker.driver.settings import redact_url
from broker.errors import AuthenticationFailed, ClosedError, ConnectionFailed

__all__ = ["Connection"]

log = logging.getLogger("broker.backends.jetstream")

#: The server's refusal of one action (nats-py passes it to the error callback, lower-cased).
_DENIED = re.compile(r'permissions violation for (publish|subscription) to "([^"]*)"')

_CONNECT_PARAMETERS = frozenset(inspect.signature(Client.connect).parameters)


def _ssl_context(settings: JetStreamSettings) -> ssl.SSLContext:
    """The client's TLS context: verifies the certificate chain and the host name unless
    ``tls_insecure`` says otherwise (which logs a WARNING)."""
    context = ssl.create_default_context(cafile=settings.tls_ca_file)
    if settings.tls_cert_file:
        context.load_cert_chain(
            settings.tls_cert_file, settings.tls_key_file, password=settings.tls_key_password
        )
    if settings.tls_insecure:
        log.warning("tls_insecure is set: the NATS server's certificate chain and host name are NOT verified")
        context.check_hostname = False
        context.verify_mode = ssl.CERT_NONE
    return context


#: TLS alerts by which a server refuses the client's certificate (or its absence).
_CLIENT_CERT_REFUSED = (
    "CERTIFICATE_REQUIRED",
    "BAD_CERTIFICATE",
    "UNKNOWN_CA",
    "CERTIFICATE_UNKNOWN",
    "CERTIFICATE_EXPIRED",
    "ACCESS_DENIED",
)


def _connect_refusal(exc: BaseException) -> Exception | None:
    """The typed error for a failed connection attempt that trying again cannot fix, else None.

    A server certificate the client rejects, a client certificate the server rejects (with TLS 1.3
    that shows only on the first read after the handshake) and refused credentials.
    """
    if isinstance(exc, ssl.SSLCertVerificationError):
        return ConnectionFailed(
            f"TLS: the NATS server's certificate was rejected: {exc.verify_message or exc.reason}"
        )
    if isinstance(exc, ssl.SSLError) and any(alert in str(exc.reason) for alert in _CLIENT_CERT_REFUSED):
        return AuthenticationFailed(
            f"TLS: the NATS server refused the client certificate ({exc.reason}); mutual TLS needs "
            "tls_cert_file and tls_key_file with a certificate the server trusts"
        )
    if isinstance(exc, ssl.SSLError):
        return ConnectionFailed(f"TLS handshake with the NATS server failed: {exc.reason or exc}")
    text = str(exc).lower()
    if isinstance(exc, nats.errors.AuthorizationError) or "authorization violation" in text:
        return AuthenticationFailed(f"the NATS server refused the credentials: {exc}")
    if "authentication expired" in text or "authentication revoked" in text:
        return AuthenticationFailed(f"the NATS server refused the credentials: {exc}")
    return None


class _Refused(Exception):
    """Raised from nats-py's error callback to end its connection loop at a refusal."""

    def __init__(self, error: Exception) -> None:
        super().__init__(str(error))
        self.error = error


class Connection:
    """A lazily opened nats-py client, its JetStream contexts, and reconnection listeners."""

    def __init__(self, settings: JetStreamSettings) -> None:
        self.settings = settings
        self._client: Client | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._lock: asyncio.Lock | None = None
        self._closed = False
        self._refused: Exception | None = None  # the last refusal of the credentials (error callback)
        self._connecting = False  # the first connection is being made: a refusal ends it
        #: While a fail-fast first connection is made: how many connection attempts were refused.
        self._unreachable: int | None = None
        self._listeners: set[Callable[[], None]] = set()
        self._denial_listeners: set[Callable[[str, str, str], None]] = set()
        self.js: JetStreamContext | None = None
        self.jsm: JetStreamManager | None = None
        self.api_prefix = f"$JS.{settings.domain}.API" if settings.domain else "$JS.API"

    def __repr__(self) -> str:
        servers = ",".join(redact_url(s) for s in self.settings.servers)
        state = "closed" if self._closed else ("connected" if self.connected else "idle")
        return f"<Connection {servers} {state}>"

    @property
    def connected(self) -> bool:
        """True while the client is connected (not connecting, reconnecting or closed)."""
        return self._client is not None and self._client.is_connected

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    def on_reconnect(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` after every reconnection; returns a function that unregisters it."""
        self._listeners.add(listener)
        return lambda: self._listeners.discard(listener)

    def on_permission_denied(self, listener: Callable[[str, str, str], None]) -> Callable[[], None]:
        """Call ``listener(action, subject, detail)`` when the server refuses an action on a subject.

        ``action`` is ``"publish"`` or ``"subscription"``; ``subject`` is lower-cased (nats-py
        lower-cases the server's error line). The server answers a refused publish only with this
        asynchronous error, never on the request's reply subject. Returns a function that unregisters.
        """
        self._denial_listeners.add(listener)
        return lambda: self._denial_listeners.discard(listener)

    async def client(self, *, fail_fast: bool = False) -> Client:
        """The connected client, connecting first if needed.

        ``fail_fast``: a first connection that every server refused once (nothing listens there)
        ends with ``ConnectionFailed`` at once instead of being retried for ``connect_timeout``.
        """
        client = self._client
        if client is not None and self._loop is asyncio.get_running_loop() and not client.is_closed:
            return client
        if self._closed:
            raise ClosedError("the NATS connection is closed")
        loop = asyncio.get_running_loop()
        if self._loop is not loop:
            if self._loop is not None and not self._loop.is_closed():
                raise ConnectionFailed(
                    "this NATS backend is in use by another running event loop; open one backend per loop"
                )
            self._loop, self._lock, self._client = loop, asyncio.Lock(), None
        assert self._lock is not None
        async with self._lock:
            if self._closed:
                raise ClosedError("the NATS connection is closed")
            if self._client is None or self._client.is_closed:
                self._client = await self._connect(fail_fast)
                self.js = self._client.jetstream(
                    timeout=self.settings.request_timeout, domain=self.settings.domain
                )
                self.jsm = self._client.jsm(timeout=self.settings.request_timeout, prefix=self.api_prefix)
            return self._client

    async def _connect(self, fail_fast: bool = False) -> Client:
        settings = self.settings
        options: dict[str, Any] = {
            "servers": list(settings.servers),
            "name": settings.name,
            "connect_timeout": settings.connect_timeout,
            "reconnect_time_wait": settings.reconnect_wait,
            "max_reconnect_attempts": settings.max_reconnect_attempts,
            "allow_reconnect": True,
            "error_cb": self._on_error,
            "reconnected_cb": self._on_reconnected,
            "disconnected_cb": self._on_disconnected,
            "user": settings.user,
            "password": settings.password,
            "token": settings.token,
            "user_credentials": settings.credentials_file,
            "nkeys_seed_str": settings.nkeys_seed,
        }
        if settings.uses_tls:
            options["tls"] = _ssl_context(settings)
            if settings.tls_hostname:
                options["tls_hostname"] = settings.tls_hostname
        if "skip_subject_validation" in _CONNECT_PARAMETERS:
            # Topics are validated once when their handle is made, not on every publish.
            options["skip_subject_validation"] = True
        options = {k: v for k, v in options.items() if v is not None and k in _CONNECT_PARAMETERS}
        client = Client()
        self._refused = None
        servers = ", ".join(redact_url(s) for s in settings.servers)
        self._connecting = True
        self._unreachable = 0 if fail_fast else None
        try:
            # nats-py retries the first connection forever when reconnection is unlimited; bound it.
            # A refusal (a certificate, the credentials) ends it at once through the error callback.
            async with asyncio.timeout(settings.connect_timeout):
                await client.connect(**options)
        except BaseException as exc:
            with contextlib.suppress(Exception):
                # after a failed TLS handshake nats-py's close waits for a socket that is gone
                async with asyncio.timeout(0.2 if isinstance(exc, _Refused) else 1):
                    await client.close()
            if isinstance(exc, _Refused):
                refusal = _connect_refusal(exc.error) or ConnectionFailed(f"nothing answers: {exc.error}")
                raise type(refusal)(f"NATS at {servers}: {refusal}") from exc.error
            refused = self._refused
            if isinstance(exc, nats.errors.AuthorizationError) or refused is not None:
                raise AuthenticationFailed(
                    f"NATS at {servers} refused the credentials: {refused or exc}"
                ) from (refused or exc)
            if isinstance(exc, TimeoutError):
                raise ConnectionFailed(
                    f"could not connect to NATS at {servers} within {settings.connect_timeout}s"
                ) from exc
            if isinstance(exc, Exception):
                raise ConnectionFailed(f"could not connect to NATS at {servers}: {exc}") from exc
            raise
        finally:
            self._connecting = False
            self._unreachable = None
        log.debug("connected to NATS at %s", servers)
        return client

    async def _on_error(self, exc: Exception) -> None:
        if self._connecting and _connect_refusal(exc) is not None:
            raise _Refused(exc)  # ends nats-py's connection loop: no retrying what cannot succeed
        if self._connecting and self._unreachable is not None and isinstance(exc, ConnectionRefusedError):
            self._unreachable += 1
            if self._unreachable >= len(self.settings.servers):  # every server refused: fail fast
                raise _Refused(exc)
        denied = _DENIED.search(str(exc).lower())
        if isinstance(exc, nats.errors.AuthorizationError) or "authorization violation" in str(exc).lower():
            self._refused = exc
            log.debug("NATS refused the credentials: %r", exc)
        elif denied is not None:
            action, subject = denied.group(1), denied.group(2)
            log.warning("NATS denied %s on %r to this user", action, subject)
            for listener in list(self._denial_listeners):
                try:
                    listener(action, subject, str(exc))
                except Exception:
                    log.exception("a NATS permission listener failed")
        elif isinstance(exc, nats.errors.SlowConsumerError):
            log.warning("NATS slow consumer: messages were dropped for subject %s", exc.subject)
        elif isinstance(exc, OSError | nats.errors.StaleConnectionError | nats.errors.UnexpectedEOF):
            log.debug("NATS connection problem: %r", exc)
        else:
            log.warning("NATS client error: %r", exc)

    async def _on_disconnected(self) -> None:
        if not self._closed:
            log.info("disconnected from NATS; reconnecting")

    async def _on_reconnected(self) -> None:
        log.info("reconnected to NATS")
        for listener in list(self._listeners):
            try:
                listener()
            except Exception:
                log.exception("a NATS reconnection listener failed")

    async def request_api(self, call: Callable[[], Awaitable[Any]], doing: str) -> Any:
        """Run a JetStream API call, translating SDK errors."""
        try:
            return await call()
        except Exception as exc:
            raise translate(exc, doing) from exc

    async def flush(self, timeout: float) -> None:
        """Wait until the server has everything sent so far (errors are logged, not raised)."""
        client = self._client
        if client is None or not client.is_connected:
            return
        try:
            async with asyncio.timeout(timeout):
                await client.flush()
        except Exception as exc:
            log.debug("flush before close failed: %r", exc)

    async def close(self) -> None:
        """Flush what is pending, then close the connection. Never hangs; idempotent."""
        if self._closed:
            return
        self._closed = True
        self._listeners.clear()
        self._denial_listeners.clear()
        client, self._client = self._client, None
        if client is None or client.is_closed:
            return
        if self._loop is not asyncio.get_running_loop():
            return  # the loop that owned it is gone; so is the socket
        timeout = self.settings.close_timeout
        await self.flush(timeout / 2)
        try:
            async with asyncio.timeout(timeout / 2):
                await client.close()
        except Exception as exc:
            log.warning("closing the NATS connection did not finish cleanly: %r", exc)
