"""Pull-based consumption: ``MessageIterator`` and ``BatchedMessageIterator`` on unary Pull RPCs.

Everything here is asyncio-native (the generated asyncio client); no thread is involved.

* A pull takes up to ``pull_max_messages`` (the batch size for the batched iterator); what it
  returns waits in the iterator with its ack deadline running. A buffered message whose
  deadline (nearly) passed is not handed out: Pub/Sub redelivers it anyway.
* A pull outlives a ``next_message`` that timed out or was cancelled (cancelling a long poll
  races with the server handing it messages, which would then stay invisible until their
  deadline): the next call picks up its result. Pulled messages nobody asks for within 2 s
  (or half the ack deadline) are nacked, so other consumers get them; a consumer that works
  longer than that per message should set ``pull_max_messages=1``. ``close()`` nacks what was
  pulled but not handed out; a pull still running is left to finish (within ``pull_timeout``,
  or when the backend closes its channel) and what it brings is nacked.
* Acks and deadline changes issued in the same event-loop turn share one RPC (``ack_all`` of a
  batch is one Acknowledge call); each ``ack()`` returns once the server took it.
* There is no automatic lease extension: ``in_progress()`` extends a message's deadline by the
  consumer's ack deadline. ``nack(delay)`` sets the deadline to ``delay`` (whole seconds, at most
  600); ``nack()`` makes it redeliverable at once.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Coroutine, Sequence
from typing import Any

from google.api_core import exceptions as api_exceptions
from google.pubsub_v1.types import PullResponse

from broker import Message
from broker.backends.pubsub.admin import SubscriptionInfo
from broker.backends.pubsub.clients import Clients
from broker.backends.pubsub.consuming import SubscriptionConsumer, SubscriptionTarget
from broker.backends.pubsub.deadletter import forward_dead_letter
from broker.backends.pubsub.errors import translate
from broker.backends.pubsub.mapping import from_received
from broker.backends.pubsub.settings import MAX_ACK_DEADLINE
from broker.driver.acking import claim_acks, release_claim, start_ack_deadline
from broker.driver.pulled import PulledBatchedMessageIteration, PulledMessageIteration
from broker.errors import AckError, BrokerError, ClosedError, ReceiveError, Timeout

__all__ = ["PubsubBatchedMessageIterator", "PubsubMessageIterator", "PullSettler"]

log = logging.getLogger("broker.backends.pubsub")

#: Ack ids per Acknowledge / ModifyAckDeadline request (as the SDK does, under the 512 KiB limit).
_ACK_IDS_PER_REQUEST = 2500
_RPC_TIMEOUT = 30.0
#: A buffered message is handed out only while this many seconds of its deadline remain.
_DEADLINE_MARGIN = 1.0
#: Seconds pulled messages wait for a caller before they are nacked (released to other consumers).
_IDLE_RELEASE = 2.0


#: Nack tasks of pulls that finished after their consumer was closed (kept from garbage collection).
_DETACHED: set[asyncio.Task[None]] = set()


def _nack_detached(task: asyncio.Task[tuple[float, list[Message]]]) -> None:
    """A pull of a closed consumer finished: nack what it brought."""
    if task.cancelled() or task.exception() is not None:
        return
    _, messages = task.result()
    if messages:
        nacks = asyncio.ensure_future(_nack_quietly(messages))
        _DETACHED.add(nacks)
        nacks.add_done_callback(_DETACHED.discard)


async def _nack_quietly(messages: list[Message]) -> None:
    """Nack ``messages``; failures are logged, not raised."""
    results = await asyncio.gather(*(m.nack() for m in messages if not m.settled), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            log.warning("could not nack %d unclaimed messages: %r", len(messages), result)
            break


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Mark a background future's error as seen (whoever awaits it gets it raised)."""
    if not future.cancelled():
        future.exception()


def _set_deadlines(settler: PullSettler, seconds: int, messages: list[Message]) -> Coroutine[Any, Any, None]:
    """Set the deadline of ``messages`` (never handed out) to ``seconds``; failures are logged.

    The changes are queued at once, so they go out in the same request as whatever else this
    pass of the event loop queued (a nack and the give-back of its key's later messages travel
    together, in order); the returned coroutine waits for them.
    """
    futures = [settler._queue(seconds, m.raw.ack_id) for m in messages]
    return _log_deadline_failures(futures)


async def _log_deadline_failures(futures: list[asyncio.Future[None]]) -> None:
    """Wait for queued deadline changes; log (do not raise) a failure."""
    try:
        await asyncio.gather(*futures)
    except Exception as exc:
        log.warning("could not set the ack deadline of %d buffered messages: %r", len(futures), exc)


def _ordering_key(message: Message) -> str:
    """The ordering key a pulled message was published with ("" for none)."""
    return str(message.raw.message.ordering_key)


def nack_seconds(delay: float | None) -> int:
    """The ack deadline (whole seconds, 0..600) that redelivers a message after ``delay``."""
    if not delay:
        return 0
    return min(MAX_ACK_DEADLINE, math.ceil(delay))


class PullSettler:
    """The :class:`~broker.message.Acker` of pulled messages: batched Acknowledge and ModifyAckDeadline.

    ``Message.raw`` is the ``ReceivedMessage`` protobuf; its ``ack_id`` identifies the delivery.
    """

    def __init__(
        self,
        clients: Clients,
        info: Callable[[], SubscriptionInfo],
        lease: Callable[[], int],
        rpc_timeout: float = _RPC_TIMEOUT,
    ) -> None:
        self._clients = clients
        self._rpc_timeout = rpc_timeout
        self._info = info
        self._lease = lease
        self._acks: list[tuple[str, asyncio.Future[None]]] = []
        self._modacks: dict[int, list[tuple[str, asyncio.Future[None]]]] = {}
        self._flushing = False
        self._sends: set[asyncio.Task[None]] = set()
        #: Called after a message's nack is queued (with the message and the delay).
        self.on_nack: Callable[[Message, float | None], None] | None = None

    def _queue(self, seconds: int | None, ack_id: str) -> asyncio.Future[None]:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        if seconds is None:
            self._acks.append((ack_id, future))
        else:
            self._modacks.setdefault(seconds, []).append((ack_id, future))
        if not self._flushing:
            self._flushing = True
            loop.call_soon(self._flush)
        return future

    def _flush(self) -> None:
        self._flushing = False
        acks, self._acks = self._acks, []
        modacks, self._modacks = self._modacks, {}
        task = asyncio.ensure_future(self._send(acks, modacks))
        self._sends.add(task)
        task.add_done_callback(self._sends.discard)

    async def _send(
        self,
        acks: list[tuple[str, asyncio.Future[None]]],
        modacks: dict[int, list[tuple[str, asyncio.Future[None]]]],
    ) -> None:
        try:
            path = self._info().path
            client = self._clients.async_subscriber()
        except BrokerError as exc:
            for _, future in [*acks, *(item for items in modacks.values() for item in items)]:
                if not future.done():
                    future.set_exception(exc)
            return
        jobs: list[tuple[int | None, list[tuple[str, asyncio.Future[None]]]]] = [(None, acks)] if acks else []
        jobs.extend(modacks.items())
        # One bound for the whole send (its requests go one after the other): an ack, nack or
        # deadline change returns or fails within rpc_timeout, also when the server is gone.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._rpc_timeout
        for seconds, items in jobs:
            for start in range(0, len(items), _ACK_IDS_PER_REQUEST):
                chunk = items[start : start + _ACK_IDS_PER_REQUEST]
                ack_ids = [ack_id for ack_id, _ in chunk]
                error: BaseException | None = None
                try:
                    # The client's timeout bounds each attempt; its retries of an unreachable
                    # server do not stop there, so the whole call is bounded here too.
                    async with asyncio.timeout_at(deadline):
                        left = max(0.001, deadline - loop.time())
                        if seconds is None:
                            await client.acknowledge(subscription=path, ack_ids=ack_ids, timeout=left)
                        else:
                            await client.modify_ack_deadline(
                                subscription=path, ack_ids=ack_ids, ack_deadline_seconds=seconds, timeout=left
                            )
                except Exception as exc:
                    what = (
                        "acknowledging" if seconds is None else f"setting the ack deadline to {seconds}s of"
                    )
                    error = translate(exc, f"{what} {len(ack_ids)} message(s) of {path}", AckError)
                for _, future in chunk:
                    if future.done():
                        continue
                    if error is None:
                        future.set_result(None)
                    else:
                        future.set_exception(error)

    async def wait_sent(self, timeout: float) -> None:
        """Wait (up to ``timeout`` seconds) for every queued ack and deadline change to be sent."""
        if self._flushing:
            self._flush()
        if self._sends:
            await asyncio.wait(set(self._sends), timeout=timeout)

    async def nack_id(self, ack_id: str, delay: float | None = None) -> None:
        """Redeliver the delivery ``ack_id`` (now, or after ``delay``); for deliveries never made Messages."""
        await self._queue(nack_seconds(delay), ack_id)

    # -- the Acker protocol ---------------------------------------------------------------
    async def ack(self, message: Message) -> None:
        """Acknowledge: the message is not delivered again."""
        await self._queue(None, message.raw.ack_id)

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack this settler's pending messages among ``messages`` (one RPC); returns the others."""
        claimed, others = claim_acks(messages, self)
        if claimed:
            try:
                await asyncio.gather(*(self._queue(None, m.raw.ack_id) for m in claimed))
            except BaseException:
                for message in claimed:
                    release_claim(message)
                raise
        return others

    async def nack(self, message: Message, delay: float | None) -> None:
        """Redeliver the message now, or after ``delay`` seconds (rounded up, at most 600)."""
        queued = self._queue(nack_seconds(delay), message.raw.ack_id)
        if self.on_nack is not None:
            self.on_nack(message, delay)
        await queued

    async def in_progress(self, message: Message) -> None:
        """Extend the message's deadline by the consumer's ack deadline."""
        await self._queue(self._lease(), message.raw.ack_id)

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Forward the message to the dead-letter topic (if the subscription has one) and ack it."""
        await forward_dead_letter(self._clients, self._info(), message, reason, self._rpc_timeout)
        await self._queue(None, message.raw.ack_id)


class _PullConsumer(SubscriptionConsumer):
    """What the single and batched iterators share: opening, pulling, buffering, closing."""

    def __init__(self, target: SubscriptionTarget, explicit_deadline: bool, pull_size: int) -> None:
        super().__init__(target)
        self._explicit_deadline = explicit_deadline
        self._pull_size = pull_size
        self._info: SubscriptionInfo | None = None
        self._lease = self.options.lease_seconds
        self._override = False
        self._buffer: deque[tuple[float, Message]] = deque()
        self._pull: asyncio.Task[tuple[float, list[Message]]] | None = None
        self._waiting = 0  # callers inside _take
        self._release: asyncio.TimerHandle | None = None
        self._idle_release = min(_IDLE_RELEASE, self._lease / 2)
        self._nacks: set[asyncio.Task[None]] = set()
        self._closing: asyncio.Future[None] | None = None
        self._opening: asyncio.Future[SubscriptionInfo] | None = None
        self._ordered = False  # the subscription delivers in order of ordering keys
        self._renewal: asyncio.TimerHandle | None = None
        #: The Acker of every message this consumer hands out.
        self.settler = PullSettler(
            self._clients, self._subscription_info, lambda: self._lease, self._settings.rpc_timeout
        )
        self.settler.on_nack = self._nacked

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic}/{self.subscription}>"

    def _subscription_info(self) -> SubscriptionInfo:
        if self._info is None:  # pragma: no cover - messages exist only after opening
            raise ReceiveError("the subscription was not opened yet")
        return self._info

    def start_opening(self) -> None:
        """Begin :meth:`open` in the background (when a loop runs): the subscription is created soon
        after the consumer object, not only when it is entered or first pulled from."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        task = self._opening = loop.create_task(self._open())
        task.add_done_callback(_retrieve)

    async def open(self) -> SubscriptionInfo:
        """Look up (or create) the subscription; done on entering, or by the first pull."""
        self._check_open()
        if self._info is not None:
            return self._info
        task = self._opening
        if task is None or (task.done() and (task.cancelled() or task.exception() is not None)):
            # no attempt yet, or it failed: try (again), so the error is this caller's
            task = self._opening = asyncio.ensure_future(self._open())
            task.add_done_callback(_retrieve)
        return await asyncio.shield(task)

    async def _open(self) -> SubscriptionInfo:
        if self._info is None:
            info = await self._ensure_subscription()
            if self._explicit_deadline and info.ack_deadline != self.options.lease_seconds:
                self._override = True  # every pulled message gets this consumer's deadline
            else:
                self._lease = info.ack_deadline
                self._idle_release = min(_IDLE_RELEASE, self._lease / 2)
            self._ordered = info.message_ordering
            self._info = info
        return self._info

    async def _pull_once(self) -> tuple[float, list[Message]]:
        """One pull: (monotonic time of receipt, the messages)."""
        info = await self.open()
        client = self._clients.async_subscriber()
        try:
            response = await client.pull(
                request={"subscription": info.path, "max_messages": self._pull_size},
                timeout=self._settings.pull_timeout,
            )
        except api_exceptions.DeadlineExceeded:
            return time.monotonic(), []  # an idle long poll
        except Exception as exc:
            raise translate(exc, f"pulling from {info.path}", ReceiveError) from exc
        pulled_at = time.monotonic()
        received = PullResponse.pb(response).received_messages
        if not received:
            return pulled_at, []
        if self._override:
            with contextlib.suppress(BrokerError):  # best effort: the subscription's deadline still holds
                await asyncio.gather(*(self.settler._queue(self._lease, r.ack_id) for r in received))
        now = time.time()
        settler = self.settler
        messages = [from_received(r, settler, now) for r in received]
        start_ack_deadline(messages, self._lease)  # the client counts from the pull's answer
        return pulled_at, messages

    def _from_buffer(self, limit: int) -> list[Message]:
        buffer = self._buffer
        if not buffer:
            return []
        out: list[Message] = []
        fresh_after = time.monotonic() - (self._lease - _DEADLINE_MARGIN)
        while buffer and len(out) < limit:
            pulled_at, message = buffer.popleft()
            if pulled_at < fresh_after:
                log.debug(
                    "message %s waited past its ack deadline in the buffer; Pub/Sub redelivers it", message.id
                )
                continue
            out.append(message)
        return out

    def _keep(self, task: asyncio.Task[tuple[float, list[Message]]]) -> None:
        """Buffer what a finished pull returned (nothing if it failed or was cancelled)."""
        if task.done() and not task.cancelled() and task.exception() is None:
            pulled_at, messages = task.result()
            self._buffer.extend((pulled_at, m) for m in messages)

    def _pull_done(self, task: asyncio.Task[tuple[float, list[Message]]]) -> None:
        """A pull finished; if no caller waits for it, buffer its messages and arm the idle release."""
        if self._pull is task and self._waiting == 0 and not self._closed:
            self._pull = None
            self._keep(task)
            self._arm_release()

    def _arm_release(self) -> None:
        if not self._buffer or self._closed:
            return
        loop = asyncio.get_running_loop()
        keyed = self._ordered and any(_ordering_key(m) for _, m in self._buffer)
        if keyed and self._renewal is None:
            # Releasing a message with an ordering key would break its key's order (it comes
            # back after later ones): such messages are kept leased until handed out or closed.
            self._renewal = loop.call_later(max(1.0, self._lease / 3), self._renew_buffer)
        if self._waiting == 0 and self._release is None:
            if not keyed or any(not _ordering_key(m) for _, m in self._buffer):
                self._release = loop.call_later(self._idle_release, self._release_buffer)

    def _renew_buffer(self) -> None:
        """Extend the deadline of the buffered messages with an ordering key (ordering subscriptions)."""
        self._renewal = None
        if self._closed or not self._buffer:
            return
        now = time.monotonic()
        renewed: list[Message] = []
        buffer: deque[tuple[float, Message]] = deque()
        for pulled_at, message in self._buffer:
            if _ordering_key(message):
                renewed.append(message)
                buffer.append((now, message))
            else:
                buffer.append((pulled_at, message))
        self._buffer = buffer
        if renewed:
            start_ack_deadline(renewed, self._lease)
            self._background(_set_deadlines(self.settler, self._lease, renewed))
        self._arm_release()

    def _background(self, work: Coroutine[Any, Any, None]) -> None:
        """Run ``work`` as a task that ``close()`` waits for."""
        task = asyncio.ensure_future(work)
        self._nacks.add(task)
        task.add_done_callback(self._nacks.discard)

    def _nacked(self, message: Message, delay: float | None) -> None:
        """``message`` was nacked: on an ordering subscription, give back the buffered later
        messages of its key too, so none of them is handed out before it comes back."""
        key = _ordering_key(message)
        if not self._ordered or not key or not self._buffer:
            return
        later = [m for _, m in self._buffer if _ordering_key(m) == key]
        if not later:
            return
        self._buffer = deque(item for item in self._buffer if _ordering_key(item[1]) != key)
        self._background(_set_deadlines(self.settler, nack_seconds(delay), later))

    def _release_buffer(self) -> None:
        """Nobody asked for the buffered messages for a while: nack them, so others get them."""
        self._release = None
        if self._waiting or not self._buffer:
            return
        if self._ordered:  # messages with an ordering key stay (see _arm_release)
            leftovers = [m for _, m in self._buffer if not _ordering_key(m)]
            self._buffer = deque(item for item in self._buffer if _ordering_key(item[1]))
        else:
            leftovers = [m for _, m in self._buffer]
            self._buffer.clear()
        if not leftovers:
            return
        log.debug("releasing %d unclaimed messages of %s", len(leftovers), self.subscription)
        task = asyncio.ensure_future(_nack_quietly(leftovers))
        self._nacks.add(task)
        task.add_done_callback(self._nacks.discard)

    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        self._check_open()
        if self._release is not None:
            self._release.cancel()
            self._release = None
        self._waiting += 1
        try:
            return await self._take_waiting(limit, timeout)
        finally:
            self._waiting -= 1
            self._arm_release()

    async def _take_waiting(self, limit: int, timeout: float | None) -> list[Message]:
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            out = self._from_buffer(limit)
            if out:
                return out
            task = self._pull
            if task is None:
                task = self._pull = asyncio.ensure_future(self._pull_once())
                task.add_done_callback(self._pull_done)
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0 and not task.done():
                raise Timeout(f"no message on {self.topic}/{self.subscription} within {timeout}s")
            if self._closing is None:
                self._closing = loop.create_future()
            waits: set[asyncio.Future[Any]] = {task, self._closing}
            try:
                await asyncio.wait(waits, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
            finally:
                # Also when this caller is cancelled: a finished pull's messages go to the buffer
                # (a running one goes on; what it brings is released if nobody asks for it).
                if task.done() and self._pull is task:
                    self._pull = None
                    self._keep(task)
            if self._closed:
                raise ClosedError(f"the Pub/Sub consumer of {self.topic}/{self.subscription} was closed")
            if task.done() and not task.cancelled():
                error = task.exception()
                if error is not None:
                    raise error

    async def close(self) -> None:
        """Stop pulling; nack what was pulled but not handed out. Idempotent."""
        if self._closed:
            return
        self._closed = True
        if self._release is not None:
            self._release.cancel()
            self._release = None
        if self._renewal is not None:
            self._renewal.cancel()
            self._renewal = None
        if self._closing is not None and not self._closing.done():
            self._closing.set_result(None)  # wakes the callers waiting for a pull
        task, self._pull = self._pull, None
        if task is not None:
            if task.done():
                self._keep(task)
            else:
                # Not cancelled: a long poll cancelled just as the server hands it messages would
                # hide them until their deadline. It runs out on its own; what it brings is nacked.
                task.add_done_callback(_nack_detached)
        leftovers = [m for _, m in self._buffer]
        self._buffer.clear()
        if leftovers:
            await _nack_quietly(leftovers)
        if self._nacks:
            await asyncio.wait(set(self._nacks), timeout=self._settings.close_timeout)
        await self.settler.wait_sent(self._settings.close_timeout)


class PubsubMessageIterator(_PullConsumer, PulledMessageIteration):
    """A MessageIterator on a Pub/Sub subscription (unary pull, per-message ack)."""


class PubsubBatchedMessageIterator(_PullConsumer, PulledBatchedMessageIteration):
    """A BatchedMessageIterator: each batch is what one pull returned, up to ``batch_size``."""

    def __init__(
        self, target: SubscriptionTarget, explicit_deadline: bool, batch_size: int, *, batch_timeout: float
    ) -> None:
        super().__init__(target, explicit_deadline, batch_size)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
