"""The pull engine under every consumer of this backend: pull requests, one inbox, a buffer.

A :class:`PullEngine` binds to one JetStream consumer. When its buffer is empty and a caller
wants messages, it sends a pull request whose replies come to the engine's inbox; deliveries land
in the buffer (the nats-py callback does nothing else), and the waiting caller takes up to its
limit. At most one pull request is open at a time; it ends when its batch is complete, when the
server reports its end (404/408/409), or when its expiry passed locally (a restarted server
forgets requests without saying so).

Requests alternate between two kinds:

* a probe (``{"batch": n, "no_wait": true}``) takes up to ``n`` (the prefetch or batch size) of
  what is there now and ends at once - this is how a backlog is read, ``n`` per round trip;
* when the probe found nothing, a waiting request (``{"batch": limit, "expires": t}``) asks for
  only what the caller is waiting for (1 for ``next_message``), so an idle consumer holds no
  request that would swallow later messages - redeliveries of nacked messages included - into a
  buffer nobody may read again (each delivery counts against ``max_deliver``).

Cancelling a caller while its request is open retires the inbox: the subscription is drained
(unsubscribed, with a round trip so deliveries already on the way still land in the buffer) and
the next request uses a new inbox. The server checks interest before it delivers to a waiting
request, so a redelivery (of a message nacked right after the cancel, say) goes to a consumer
that is still listening instead of to an abandoned request.

The engine never converts messages; the iterators do, only for what they hand out.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg
from nats.aio.subscription import Subscription
from nats.js import api

from broker.backends.jetstream.connection import Connection
from broker.backends.jetstream.errors import translate
from broker.errors import ClosedError, ConfigError, ConnectionFailed, PermissionDenied, Timeout, UnknownTopic

__all__ = ["PullEngine", "Target"]

log = logging.getLogger("broker.backends.jetstream")

#: How long after a pull request's expiry its end (408) may still arrive (seconds).
_GRACE: Final = 0.25
#: Pause before pulling again after the server said JetStream is unavailable (seconds).
_BACKOFF: Final = 0.25
#: Below this many seconds a pull asks only for what is there now (``no_wait``).
_NO_WAIT_BELOW: Final = 0.01

#: Words of 409 descriptions that mean the pull requests can never succeed as they are.
_REFUSALS = ("maxrequestbatch", "maxrequestexpires", "maxrequestmaxbytes", "push based")

_STATUS = api.Header.STATUS.value
_DESCRIPTION = api.Header.DESCRIPTION


@dataclass(slots=True)
class Target:
    """Where an engine pulls from: its stream and consumer, resolved (and re-made) on demand."""

    stream: str
    consumer: str


#: Resolves the engine's target; ``True`` asks to check it again (the consumer may be gone).
Resolver = Callable[[bool], Awaitable[Target]]


class PullEngine:
    """Pulls messages of one JetStream consumer through one inbox."""

    def __init__(
        self, connection: Connection, resolve: Resolver, what: str, pull_expires: float = 5.0
    ) -> None:
        self.connection = connection
        self.what = what
        #: Longest a single pull request waits at the server (seconds).
        self.pull_expires = pull_expires
        self._resolve = resolve
        self.client: Client | None = None
        self.target: Target | None = None
        self._next_subject = ""
        self._buffer: deque[Msg] = deque()
        self._waiters: set[asyncio.Future[None]] = set()
        self._sub: Subscription | None = None
        self._inbox = ""
        self._generation = 0
        self._open = False
        self._remaining = 0
        self._request_deadline = 0.0
        self._not_before = 0.0
        self._recheck = False
        self._failure: BaseException | None = None
        self._probe = True
        self._closed = False
        self._retiring: set[asyncio.Task[None]] = set()
        self._start_lock: asyncio.Lock | None = None
        self._unlisten: Callable[[], None] | None = None
        self._unlisten_denied: Callable[[], None] | None = None

    def __repr__(self) -> str:
        return f"<PullEngine {self.what} buffered={len(self._buffer)} open={self._open}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` was called."""
        return self._closed

    @property
    def buffered(self) -> int:
        """Messages received and not handed out yet."""
        return len(self._buffer)

    def newest(self) -> Msg | None:
        """The last message received and not handed out yet."""
        return self._buffer[-1] if self._buffer else None

    # -- starting ----------------------------------------------------------------------------
    async def _restart(self) -> None:
        """Start, or start again on a new client after nats-py gave up reconnecting the old one."""
        client = self.client
        if client is not None and client.is_closed and not self.connection.closed:
            log.info("%s: the NATS connection was lost for good; binding again on a new one", self.what)
            self.target = None
            self._sub = None
            self._open = False
            self._generation += 1
        await self._start()

    async def _start(self) -> None:
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.target is not None:
                return
            if self._closed:
                raise ClosedError(f"the consumer {self.what} is closed")
            self.client = await self.connection.client()
            target = await self._resolve(False)
            self._bind(target)
            if self._unlisten is None:
                self._unlisten = self.connection.on_reconnect(self._on_reconnect)
            if self._unlisten_denied is None:
                self._unlisten_denied = self.connection.on_permission_denied(self._on_denied)

    def _bind(self, target: Target) -> None:
        self.target = target
        prefix = self.connection.api_prefix
        self._next_subject = f"{prefix}.CONSUMER.MSG.NEXT.{target.stream}.{target.consumer}"

    def _on_reconnect(self) -> None:
        # Requests waiting at the server may be gone with it; ask again.
        self._open = False
        self._probe = True
        self._wake()

    def _on_denied(self, action: str, subject: str, detail: str) -> None:
        # The server refuses a pull request (or the inbox subscription) only with an
        # asynchronous -ERR: without this the consumer would wait for messages forever.
        mine = (("publish", self._next_subject.lower()), ("subscription", self._inbox.lower()))
        if (action, subject) in mine:
            self._failure = PermissionDenied(
                f"pulling from {self.what}: the server denies this user ({detail})"
            )
            self._open = False
            self._wake()

    def _wake(self) -> None:
        for waiter in self._waiters:
            if not waiter.done():
                waiter.set_result(None)

    # -- receiving ---------------------------------------------------------------------------
    def _callback(self, generation: int) -> Callable[[Msg], Awaitable[None]]:
        buffer = self._buffer

        async def on_message(msg: Msg) -> None:
            if msg.reply:  # a delivery (status messages have no reply subject)
                buffer.append(msg)
                self._probe = True  # something came: there may be more, ask what is there first
                if generation == self._generation and self._open:
                    self._remaining -= 1
                    if self._remaining <= 0:
                        self._open = False
                if self._waiters:
                    self._wake()
                return
            headers = msg.headers or {}
            status = headers.get(_STATUS)
            if status == "100":  # idle heartbeat or flow control
                return
            if generation == self._generation:
                self._open = False
            if status not in ("404", "408"):  # anything else: do not ask again at once
                self._not_before = asyncio.get_running_loop().time() + _BACKOFF
            description = str(headers.get(_DESCRIPTION, ""))
            lowered = description.lower()
            if status == "503" or "deleted" in lowered:
                self._recheck = True  # JetStream away or the consumer gone: look again
            elif status == "400" or any(word in lowered for word in _REFUSALS):
                self._failure = ConfigError(
                    f"JetStream refused the pull requests of {self.what}: {description}"
                )
            elif status not in ("404", "408"):
                log.info("pull request of %s ended: %s %s", self.what, status, description)
            self._wake()

        return on_message

    async def _subscribe(self) -> None:
        assert self.client is not None
        self._generation += 1
        self._inbox = self.client.new_inbox()
        try:
            self._sub = await self.client.subscribe(
                self._inbox,
                cb=self._callback(self._generation),
                pending_msgs_limit=0,
                pending_bytes_limit=0,
            )
        except Exception as exc:
            raise translate(exc, f"subscribing the inbox of {self.what}") from exc

    async def _request(self, limit: int, batch: int, wait: float | None, now: float) -> None:
        if self._sub is None:
            await self._subscribe()
        expires = self.pull_expires if wait is None else min(wait, self.pull_expires)
        if self._probe or expires < _NO_WAIT_BELOW:
            payload = b'{"batch": %d, "no_wait": true}' % batch
            self._request_deadline = now + 1.0
            self._probe = False
        else:
            batch = limit
            payload = b'{"batch": %d, "expires": %d}' % (batch, int(expires * 1e9))
            self._request_deadline = now + expires + _GRACE
            self._probe = True
        assert self.client is not None
        self._open = True
        self._remaining = batch
        try:
            await self.client.publish(self._next_subject, payload, reply=self._inbox)
        except Exception as exc:
            self._open = False
            raise translate(exc, f"pulling from {self.what}") from exc

    def _take(self, limit: int) -> list[Msg]:
        buffer = self._buffer
        if len(buffer) <= limit:
            out = list(buffer)
            buffer.clear()
            return out
        return [buffer.popleft() for _ in range(limit)]

    async def pull(self, limit: int, batch: int, timeout: float | None) -> list[Msg]:
        """Up to ``limit`` messages, pulling ``batch`` at a time; ``[]`` when none came in ``timeout``."""
        if self._closed:
            raise ClosedError(f"the consumer {self.what} is closed")
        if self._buffer:
            return self._take(limit)
        client = self.client
        if self.target is None or client is None or (client.is_closed and not self.connection.closed):
            await self._restart()
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closed:
                raise ClosedError(f"the consumer {self.what} is closed")
            if self._buffer:
                return self._take(limit)
            if self._failure is not None:
                failure, self._failure = self._failure, None
                raise failure
            now = loop.time()
            if deadline is not None and now >= deadline:
                return []
            if self._open and now >= self._request_deadline:
                self._open = False
            if not self._open and now >= self._not_before:
                if self._recheck:
                    await self._check_target(loop)
                    continue
                wait = None if deadline is None else deadline - now
                await self._request(limit, max(batch, limit), wait, now)
            wake_at = self._request_deadline if self._open else self._not_before
            if deadline is not None and deadline < wake_at:
                wake_at = deadline
            waiter = loop.create_future()
            waiters = self._waiters
            waiters.add(waiter)
            timer = loop.call_at(wake_at, _resolve, waiter)
            try:
                await waiter
            except asyncio.CancelledError:
                waiters.discard(waiter)
                if self._open and not waiters:
                    self._retire()  # nobody waits for the open request any more
                raise
            finally:
                timer.cancel()
                waiters.discard(waiter)

    async def _check_target(self, loop: asyncio.AbstractEventLoop) -> None:
        """The server said the consumer is gone or JetStream is away: check (and re-make) it."""
        try:
            target = await self._resolve(True)
        except (ConnectionFailed, Timeout) as exc:
            log.debug("%s: JetStream not available yet (%r); retrying", self.what, exc)
            self._not_before = loop.time() + _BACKOFF * 2
            return
        except UnknownTopic:
            self._recheck = False
            raise
        self._recheck = False
        self._bind(target)

    def _retire(self) -> None:
        """Stop listening on the current inbox (its open request may still deliver elsewhere)."""
        sub, self._sub = self._sub, None
        self._open = False
        self._generation += 1
        if sub is not None:
            task = asyncio.get_running_loop().create_task(self._drain(sub))
            self._retiring.add(task)
            task.add_done_callback(self._retiring.discard)

    async def _drain(self, sub: Subscription) -> None:
        client = self.client
        try:
            if client is None or not client.is_connected:
                # No round trip to wait for: drop the interest now (the server forgets it anyway).
                await sub.unsubscribe()
                return
            async with asyncio.timeout(self.connection.settings.close_timeout):
                await sub.drain()  # type: ignore[no-untyped-call]
        except Exception as exc:
            log.debug("draining an inbox of %s failed: %r", self.what, exc)
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    # -- closing -----------------------------------------------------------------------------
    async def close(self) -> list[Msg]:
        """Stop pulling; returns the messages received and never handed out (settle them)."""
        if self._closed:
            return []
        self._closed = True
        self._wake()
        if self._unlisten is not None:
            self._unlisten()
            self._unlisten = None
        if self._unlisten_denied is not None:
            self._unlisten_denied()
            self._unlisten_denied = None
        if self._sub is not None and self.client is not None and not self.client.is_closed:
            self._retire()
        if self._retiring:
            with contextlib.suppress(Exception):
                await asyncio.gather(*self._retiring, return_exceptions=True)
        leftovers = list(self._buffer)
        self._buffer.clear()
        return leftovers


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)
