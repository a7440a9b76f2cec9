"""The asyncio side of a confluent-kafka ``Consumer``: fetching, rebalances, commits, close.

Every SDK call runs on the consumer's own :class:`~broker.backends.kafka.threads.SdkThread` (the SDK lets
one thread in at a time). Fetches are short (``consume`` waits at most ``POLL_SLICE`` seconds per
call) so a commit, seek or close queued behind one waits briefly. A fetch abandoned by a cancelled
caller is not lost: its result is kept and handed to the next caller.

Two cores share that machinery:

* :class:`GroupCore` subscribes to topics in a consumer group. Rebalance callbacks fire inside
  ``consume`` on the worker thread; they run the async :class:`~broker.log.RebalanceListener` on
  the event loop while the worker keeps serving the listener's commits and seeks. Each assigned
  partition gets a committer; records carry it, so ``Record.ack()`` commits ``offset + 1``. When a
  partition is revoked its committer is retired first, so late acks are dropped, never sent with a
  stale generation. Concurrent acks are coalesced into one commit request.
* :class:`ReaderCore` assigns partitions at explicit offsets, outside any group, and never commits.
"""

from __future__ import annotations

import abc
import asyncio
import contextvars
import logging
import time
import uuid
from collections.abc import Coroutine, Mapping, Sequence
from typing import Any, Final

from broker import Record
from broker.backends.kafka import sdk
from broker.backends.kafka.errors import (
    AUTHENTICATION,
    DENIED,
    error_of,
    is_refusal,
    receive_error,
    translate,
)
from broker.backends.kafka.mapping import accepted, to_records
from broker.backends.kafka.threads import SdkThread, resolve, sdk_client
from broker.errors import AckError, ClosedError, ConfigError, ReceiveError, UnknownTopic
from broker.log import OFFSET_BEGINNING, OFFSET_END, RebalanceListener, TopicPartition

__all__ = ["COMMIT_INTERVAL", "JOIN_WAIT_SESSIONS", "POLL_SLICE", "GroupCore", "ReaderCore"]

log = logging.getLogger("broker.backends.kafka")

#: The longest single ``consume`` call, in seconds: bounds how long a queued call waits.
POLL_SLICE: Final = 0.05

#: Seconds each close step may take once the broker refused the client (see ``_close_bound``).
_REFUSED_CLOSE_BOUND: Final = 1.0

#: How many session timeouts ``close()`` serves a group join in flight before leaving anyway
#: (never longer than ``close_timeout``). On Tansu a join costs about half a session timeout and a
#: rejoin waiting for the broker to expel a dead member about 1.5; a join still unfinished after
#: two is stuck (another member that never rejoins, or Tansu's coordinator after a group emptied)
#: and serving it longer only delays the close.
JOIN_WAIT_SESSIONS: Final = 2.0

#: The shortest time between two commits of acks that do not wait (seconds): acks arriving in
#: between are merged into the next commit, so a handler acking one record at a time does not
#: send one commit request per record.
COMMIT_INTERVAL: Final = 0.005

TP = tuple[str, int]

#: The core whose rebalance listener is running in this context (polling it there would deadlock).
_LISTENER_OF: contextvars.ContextVar[object] = contextvars.ContextVar("kafka_listener_of", default=None)


class _DroppingCommitter:
    """The committer of records whose partition is gone (or of a reader): acks are dropped."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason

    async def commit(self, record: Record) -> None:
        log.debug("ack of %s[%d]@%d dropped: %s", record.topic, record.partition, record.offset, self.reason)


_REVOKED: Final = _DroppingCommitter("the partition is no longer assigned to this consumer")
_READER: Final = _DroppingCommitter("readers outside a group never commit")


class PartitionCommitter:
    """Commits for records of one partition during one assignment of it to this member."""

    __slots__ = ("acked", "confirmed", "core", "revoked", "tp")

    def __init__(self, core: GroupCore, tp: TP) -> None:
        self.core = core
        self.tp = tp
        self.revoked = False
        #: The highest next-offset acked (or committed explicitly) so far.
        self.acked = -1
        #: The highest next-offset the broker confirmed.
        self.confirmed = -1

    async def commit(self, record: Record) -> None:
        """Commit ``record.offset + 1`` unless a higher offset was acked or the partition is gone."""
        await self.commit_next(record.offset + 1)

    async def commit_next(self, offset: int) -> None:
        """Commit ``offset`` as the next to read, never moving the commit backwards."""
        if self.revoked:
            log.debug("commit of %s[%d] at %d dropped: partition revoked", self.tp[0], self.tp[1], offset)
            return
        if offset <= self.acked:
            return
        previous, self.acked = self.acked, offset
        if not self.core.ack_waits:
            self.core.commit_soon(self.tp, offset)
            return
        try:
            await self.core.commit({self.tp: offset})
        except BaseException:
            if self.acked == offset:
                self.acked = previous
            raise


class _CoreBase(abc.ABC):
    """Fetching on the worker thread, the fetch buffer, seek/pause/resume, close."""

    def __init__(self, config: dict[str, Any], *, name: str, prefetch: int, close_timeout: float) -> None:
        self._user_error_cb = config.get("error_cb")
        self.consumer = sdk_client("Consumer", {**config, "error_cb": self._on_client_error})
        self.name = name
        self.prefetch = prefetch
        self.close_timeout = close_timeout
        self.thread = SdkThread(f"polybroker-kafka-{name}")
        self.closing = False
        self.closed = False
        self._loop: asyncio.AbstractEventLoop | None = None
        self._inflight: asyncio.Future[list[Any]] | None = None
        self._inflight_epoch = 0
        #: A read-ahead waiting to be sent (GroupCore sends it behind a commit about to go out).
        self._ahead_wanted = 0
        self._buffer: list[Any] = []
        self._pos = 0
        #: Bumped by every change that can make fetched messages stale (revoke, seek, pause).
        self._epoch = 0
        self._seeked: dict[TP, int] = {}
        self.paused: set[TP] = set()
        self._error: BaseException | None = None
        #: True once the broker refused this client (its login or its certificate): there is no
        #: group session to leave, so close() gives the SDK a short bound instead of close_timeout.
        self._refused = False
        #: True once the SDK consumer's close has begun (set on the worker thread): callbacks it
        #: serves then run while librdkafka's group is terminating (see ``GroupCore._sdk_owned``).
        self._sdk_closing = False
        self._warned: set[str] = set()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name}>"

    # -- owned partitions (subclasses) ----------------------------------------------------------
    @abc.abstractmethod
    def owns(self, tp: TP) -> bool:
        """True when records of ``tp`` may be handed out."""

    def _took(self, messages: list[Any]) -> None:
        """Hook: messages handed out."""

    # -- fetching --------------------------------------------------------------------------------
    def _consume(self, count: int, wait: float) -> list[Any]:
        consumer = self.consumer
        got: list[Any] = consumer.consume(count, 0)
        if got or wait <= 0:
            return got
        got = consumer.consume(1, wait)
        if got and count > 1:
            got.extend(consumer.consume(count - 1, 0))
        return got

    def _check(self) -> None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self.closing:
            raise ClosedError(f"the Kafka consumer {self.name} is closed")

    async def fetch(self, max_records: int, timeout: float | None) -> list[Any]:
        """Up to ``max_records`` SDK messages: what is ready, else the first to arrive within ``timeout``.

        Returns ``[]`` when nothing arrived in time (``timeout=None`` waits forever).
        """
        if max_records < 1:
            raise ValueError(f"max_records must be >= 1, got {max_records}")
        if _LISTENER_OF.get() is self:
            raise RuntimeError("a rebalance listener must not poll its own consumer")
        self._check()
        if self._pos < len(self._buffer):
            return self._take(max_records)
        loop = self._loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            job = self._inflight
            if job is None:
                wait = POLL_SLICE if deadline is None else min(POLL_SLICE, max(0.0, deadline - loop.time()))
                job = self._inflight = self.thread.submit(
                    self._consume, max(self.prefetch, max_records), wait
                )
                self._inflight_epoch = self._epoch
                self._ahead_wanted = 0
            try:
                # Shielded: a cancelled caller leaves the job in _inflight for the next caller.
                messages = await asyncio.shield(job)
            except Exception as exc:
                self._inflight = None
                raise self._fetch_error(exc) from exc
            self._inflight = None
            if messages:
                self._accept(messages, self._inflight_epoch)
            self._check()
            if self._pos < len(self._buffer):
                return self._take(max_records)
            if deadline is not None and loop.time() >= deadline:
                return []

    def _fetch_error(self, exc: Exception) -> Exception:
        if isinstance(exc, RuntimeError) and self.closing:
            return ClosedError(f"the Kafka consumer {self.name} is closed")
        if isinstance(exc, sdk.confluent().KafkaException):
            return translate(exc, "consuming failed", ReceiveError)
        return exc

    def _take(self, count: int) -> list[Any]:
        pos = self._pos
        out = self._buffer[pos : pos + count]
        pos += len(out)
        if pos >= len(self._buffer):
            self._buffer = []
            pos = 0
            self._read_ahead(count)
        self._pos = pos
        self._took(out)
        return out

    def _read_ahead(self, count: int) -> None:
        """The buffer ran dry: take what the SDK has queued already, while the caller handles its batch.

        The job never waits (``consume(n, 0)``), so a commit or seek posted after it is not held up;
        the next :meth:`fetch` finds its result ready instead of paying a thread round trip. What it
        took is filtered like any fetch (by epoch: revokes, seeks and pauses since) and, like the
        rest of the buffer, is read again by the partition's next owner if never handed out.
        """
        if self._inflight is None and not self.closing and self._loop is not None:
            self._inflight = self.thread.submit(self._consume, max(self.prefetch, count), 0.0)
            self._inflight_epoch = self._epoch

    def _send_read_ahead(self) -> None:
        """Send the wanted read-ahead now (if nothing else fetches)."""
        count, self._ahead_wanted = self._ahead_wanted, 0
        if count and self._inflight is None and not self.closing:
            self._inflight = self.thread.submit(self._consume, count, 0.0)
            self._inflight_epoch = self._epoch

    def _accept(self, messages: list[Any], epoch: int) -> None:
        keep = accepted(messages)
        if keep is not messages:
            for message in messages:
                error = message.error()
                if error is not None:
                    self._on_event(message, error)
        if epoch != self._epoch or self.paused:
            keep = self._filter(keep, epoch)
        if not keep:
            return
        if self._pos < len(self._buffer):
            self._buffer = self._buffer[self._pos :] + keep
        else:
            self._buffer = keep
        self._pos = 0

    def _filter(self, messages: list[Any], epoch: int) -> list[Any]:
        """Drop messages of partitions revoked, seeked or paused since their fetch was queued.

        ``epoch`` is the epoch when the fetch was queued: a seek at a later epoch makes the fetch's
        messages of that partition stale; one at the same epoch came before it, so they are the
        seek's own (dropping them would skip records nobody was handed).
        """
        out = []
        rewind: dict[TP, int] = {}
        for message in messages:
            tp = (message.topic(), message.partition())
            if not self.owns(tp) or self._seeked.get(tp, -1) > epoch:
                continue
            if tp in self.paused:
                offset = message.offset()
                if tp not in rewind or offset < rewind[tp]:
                    rewind[tp] = offset
                continue
            out.append(message)
        for tp, offset in rewind.items():
            self._post_seek(tp, offset)
        return out

    def _purge(self, tps: set[TP], *, rewind: bool) -> None:
        """Remove buffered messages of ``tps`` (seeking back to the first one when ``rewind``)."""
        if self._pos >= len(self._buffer):
            return
        kept = []
        first: dict[TP, int] = {}
        for message in self._buffer[self._pos :]:
            tp = (message.topic(), message.partition())
            if tp in tps:
                first.setdefault(tp, message.offset())
            else:
                kept.append(message)
        self._buffer, self._pos = kept, 0
        if rewind:
            for tp, offset in first.items():
                self._post_seek(tp, offset)

    def _on_client_error(self, error: Any) -> None:
        """librdkafka's ``error_cb`` (served by ``consume`` on the worker thread).

        A refused login or a rejected broker certificate is raised by the next fetch
        (``AuthenticationFailed`` / ``ConnectionFailed``), instead of the consumer waiting for
        records that never come while librdkafka retries.
        """
        if self._user_error_cb is not None:
            self._user_error_cb(error)
        if is_refusal(error):
            self._refused = True
        if is_refusal(error) and self._error is None:
            self._error = receive_error(error)
        else:
            log.debug("%s: %s", self.name, error.str())

    def _on_event(self, message: Any, error: Any) -> None:
        """An error or event in the fetched stream (partition EOF, unknown topic, fatal error)."""
        name = error.name()
        if name == "_PARTITION_EOF":
            return
        if error.fatal() or name in AUTHENTICATION or name in DENIED:
            # a refused login or access does not heal by retrying: tell the caller now
            self._error = receive_error(error)
            return
        key = f"{name}:{message.topic()}"
        if key not in self._warned:
            self._warned.add(key)
            log.warning("%s: %s (topic %s); retrying", self.name, error.str(), message.topic())

    # -- positions -------------------------------------------------------------------------------
    def _sdk_tp(self, tp: TP, offset: int = -1001) -> Any:
        return sdk.confluent().TopicPartition(tp[0], tp[1], offset)

    async def watermarks(self, tp: TP, timeout: float) -> tuple[int, int]:
        """``(low, high)`` of ``tp`` as the broker reports them (asked on the worker thread)."""
        low, high = await self.thread.submit(
            self.consumer.get_watermark_offsets, self._sdk_tp(tp), timeout, False
        )
        return int(low), int(high)

    def _post_seek(self, tp: TP, offset: int) -> None:
        self.thread.post(self._seek_now, tp, offset)

    def _seek_now(self, tp: TP, offset: int) -> None:
        try:
            self.consumer.seek(self._sdk_tp(tp, offset))
        except Exception as exc:
            log.warning("%s: seeking %s[%d] to %d failed: %s", self.name, tp[0], tp[1], offset, exc)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next (or OFFSET_BEGINNING / OFFSET_END)."""
        tp = (partition[0], partition[1])
        if not self.owns(tp):
            raise UnknownTopic(f"{TopicPartition(*tp)} is not assigned to this consumer")
        if offset < 0 and offset not in (OFFSET_BEGINNING, OFFSET_END):
            raise ConfigError(f"bad offset {offset} for {TopicPartition(*tp)}")
        self._epoch += 1
        self._seeked[tp] = self._epoch
        self._purge({tp}, rewind=False)
        self._post_seek(tp, offset)

    def pause(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop returning records of ``partitions`` until resumed."""
        tps = {(p[0], p[1]) for p in partitions}
        if not tps:
            return
        self.paused |= tps
        self._epoch += 1
        self.thread.post(self.consumer.pause, [self._sdk_tp(tp) for tp in tps])
        self._purge(tps, rewind=True)

    def resume(self, partitions: Sequence[TopicPartition]) -> None:
        """Return records of ``partitions`` again."""
        tps = {(p[0], p[1]) for p in partitions}
        if not tps:
            return
        self.paused -= tps
        self.thread.post(self.consumer.resume, [self._sdk_tp(tp) for tp in tps])

    # -- closing ---------------------------------------------------------------------------------
    async def _before_leave(self) -> None:
        """Hook: settle what must be settled before the SDK consumer closes (no time bound here)."""

    async def _before_close(self) -> None:
        """Hook: the last commits."""

    def _leave_bound(self) -> float:
        """The longest :meth:`_before_leave` may take, in seconds."""
        return self._close_bound()

    def _close_bound(self) -> float:
        """The longest each step of :meth:`close` may take: ``close_timeout``, or 1 s at most once
        the broker refused this client (nothing to commit or leave; librdkafka would only retry
        the refused login until the bound)."""
        return min(self.close_timeout, _REFUSED_CLOSE_BOUND) if self._refused else self.close_timeout

    def _after_close(self) -> None:
        """Hook: forget the assignment."""

    def _close_sdk(self) -> None:
        """The SDK consumer's close (on the worker thread), marking the rebalance callbacks it serves."""
        self._sdk_closing = True
        self.consumer.close()

    def _close_quietly(self) -> None:
        """The SDK consumer's close, on its thread after a stuck call returned (already closed: no-op)."""
        try:
            self._close_sdk()
        except RuntimeError:  # closed by the stuck call itself
            pass

    async def close(self) -> None:
        """Stop fetching, commit what is pending, leave the group, release the SDK consumer.

        Waits at most ``close_timeout`` seconds for the SDK; idempotent.
        """
        if self.closing:
            return
        self.closing = True
        self._loop = asyncio.get_running_loop()
        # True until the SDK consumer's close returned. Otherwise (stuck, failed, or this close
        # cancelled half way by its caller's timeout) the SDK consumer is closed on its own thread
        # once that is free: never left open in the group, never freed on the event loop's thread.
        stuck = True
        try:
            await asyncio.sleep(0)  # let acks already scheduled reach the commit queue
            try:
                # Bounded here too: a call stuck in the SDK thread must not hang close() (the
                # thread is a daemon and is abandoned below).
                async with asyncio.timeout(self._leave_bound()):
                    await self._before_leave()
            except TimeoutError:
                log.warning(
                    "%s: the group join did not settle within %ss; leaving", self.name, self._leave_bound()
                )
            except Exception as exc:
                log.warning("%s: waiting for the group join before leaving failed: %r", self.name, exc)
            bound = self._close_bound()
            try:
                async with asyncio.timeout(bound):
                    job = self._inflight
                    if job is not None:
                        await asyncio.gather(job, return_exceptions=True)
                        self._inflight = None
                    await self._before_close()
                    # never inside a rebalance callback still running (see SdkThread.serve_until)
                    await self.thread.submit(self._close_sdk, outside_callbacks=True)
                stuck = False
            except TimeoutError:
                log.warning("%s: the SDK consumer did not close within %ss", self.name, bound)
            except Exception as exc:  # closing must not fail the caller's cleanup
                log.warning("%s: closing failed: %r", self.name, exc)
        finally:
            self.closed = True
            if stuck:  # calls queued behind a stuck one would never run: fail them now
                self.thread.abandon(
                    ClosedError(f"the Kafka consumer {self.name} is closed"), last=self._close_quietly
                )
            else:
                self.thread.stop()
            self._buffer, self._pos = [], 0
            self._after_close()


class GroupCore(_CoreBase):
    """A consumer-group member with manual commits and an optional async rebalance listener."""

    def __init__(
        self,
        config: dict[str, Any],
        topics: Sequence[str],
        *,
        name: str,
        prefetch: int,
        close_timeout: float,
        listener: RebalanceListener | None = None,
        cooperative: bool = False,
    ) -> None:
        if not topics:
            raise ConfigError("a consumer needs at least one topic")
        config = dict(config)
        self._user_on_commit = config.pop("on_commit", None)
        config["on_commit"] = self._on_commit
        super().__init__(config, name=name, prefetch=prefetch, close_timeout=close_timeout)
        self.group = str(config.get("group.id"))
        self.topics = tuple(topics)
        self.listener = listener
        self.cooperative = cooperative
        self.assigned: set[TP] = set()
        self.committers: dict[TP, PartitionCommitter] = {}
        self._assigning: set[TP] = set()
        self._pending_seeks: dict[TP, int] = {}
        self._pending_commits: dict[TP, int] = {}
        self._commit_waiters: list[tuple[asyncio.Future[None], tuple[TP, ...]]] = []
        self._commit_task: asyncio.Task[None] | None = None
        #: Inside a callback served by the SDK's close: the partitions it may commit (_sdk_owned).
        self._close_owned: set[TP] | None = None
        #: When the last commit that nobody waits for went out (loop time); while the commit task
        #: waits out COMMIT_INTERVAL before the next, ``_pace`` is the future that wakes it.
        self._last_quiet_commit = -COMMIT_INTERVAL
        self._pace: asyncio.Future[None] | None = None
        #: False: ``Record.ack()`` queues its commit and returns (see :meth:`commit_soon`); the
        #: broker has it within a commit round trip, ``flush()`` waits for it, revoke and close
        #: flush. True: ``ack()`` returns once the broker confirmed the commit.
        self.ack_waits = True
        #: True once the group assigned this member (possibly nothing): its first join is complete.
        self.joined = False
        #: True from an eager rebalance's revoke until the next assignment: a JoinGroup is in flight.
        self.rejoining = False
        self.session_timeout = float(config.get("session.timeout.ms", 45000)) / 1000
        self.thread.post(
            self.consumer.subscribe,
            list(self.topics),
            self._on_assign,
            self._on_revoke,
            self._on_lost,
        )

    def owns(self, tp: TP) -> bool:
        """True while ``tp`` is assigned to this member."""
        return tp in self.assigned

    def _read_ahead(self, count: int) -> None:
        """Like the base, but sent when the caller first yields, and behind its commit if it commits.

        Sent at once, the read-ahead would run while the caller handles its batch (both need the
        GIL, so the fetch mostly waits for the caller's next await) and then delay the commit the
        caller sends next: on the SDK's single thread a commit queued behind it waits for it.
        """
        if self._inflight is None and not self.closing and self._loop is not None:
            self._ahead_wanted = max(self.prefetch, count)
            self._loop.call_soon(self._read_ahead_next_pass)

    def _read_ahead_next_pass(self) -> None:
        # One more loop pass: acks the caller handed to tasks (``gather``) run in this one.
        if self._loop is not None:
            self._loop.call_soon(self._read_ahead_soon)

    def _read_ahead_soon(self) -> None:
        if (self._pending_commits or self._commit_task is not None) and self._pace is None:
            return  # the commit round sends it right after its commit
        self._send_read_ahead()

    async def records(self, max_records: int, timeout: float | None) -> list[Record]:
        """Up to ``max_records`` records (see :meth:`fetch`), each committing through its partition."""
        messages = await self.fetch(max_records, timeout)
        if not messages:
            return []
        return to_records(messages, self.committers, _REVOKED, time.time())

    # -- rebalance callbacks (worker thread) -----------------------------------------------------
    def _call_loop(self, coro: Coroutine[Any, Any, None]) -> None:
        loop = self._loop
        if loop is None or loop.is_closed() or not loop.is_running():
            coro.close()
            return
        if self._sdk_closing:  # first, before the listener: which commits are safe (_sdk_owned)
            self._close_owned = self._close_owned_now()
        done = asyncio.run_coroutine_threadsafe(coro, loop)
        self.thread.serve_until(done)
        try:
            done.result()
        except Exception as exc:
            log.warning("%s: the rebalance listener failed: %r", self.name, exc)
            if self._error is None:
                self._error = exc

    def _on_assign(self, consumer: Any, partitions: list[Any]) -> None:
        self.joined = True
        self.rejoining = False
        tps = [(p.topic, p.partition) for p in partitions]
        self._call_loop(self._assigned_async(tps))
        seeks, self._pending_seeks = self._pending_seeks, {}
        if seeks:
            for p in partitions:
                offset = seeks.get((p.topic, p.partition))
                if offset is not None:
                    p.offset = offset
            if self.cooperative:
                consumer.incremental_assign(partitions)
            else:
                consumer.assign(partitions)

    def _on_revoke(self, consumer: Any, partitions: list[Any]) -> None:
        if not self.closing and not self.cooperative:
            self.rejoining = True  # eager: the member rejoins right after giving everything back
        self._call_loop(self._revoked_async([(p.topic, p.partition) for p in partitions], lost=False))

    def _on_lost(self, consumer: Any, partitions: list[Any]) -> None:
        self._call_loop(self._revoked_async([(p.topic, p.partition) for p in partitions], lost=True))

    async def _assigned_async(self, tps: list[TP]) -> None:
        for tp in tps:
            self.committers[tp] = PartitionCommitter(self, tp)
            self.assigned.add(tp)
            self._seeked.pop(tp, None)
        log.debug("%s: assigned %s", self.name, tps)
        if self.listener is not None and tps:
            self._assigning = set(tps)
            _LISTENER_OF.set(self)
            try:
                await self.listener.on_assigned(sorted(TopicPartition(*tp) for tp in tps))
            finally:
                self._assigning = set()

    async def _revoked_async(self, tps: list[TP], *, lost: bool) -> None:
        gone = set(tps)
        if lost:
            self._retire(gone)
        if self.listener is not None and tps:
            _LISTENER_OF.set(self)
            await self.listener.on_revoked(sorted(TopicPartition(*tp) for tp in tps))
        if lost:
            await self._drain_commits()
        else:
            await self._flush_quietly()  # the acks of this member go in while it still owns them
        self._retire(gone)
        log.debug("%s: %s %s", self.name, "lost" if lost else "revoked", tps)

    def _retire(self, gone: set[TP]) -> None:
        for tp in gone:
            committer = self.committers.pop(tp, None)
            if committer is not None:
                committer.revoked = True
            self.assigned.discard(tp)
            self.paused.discard(tp)
        self._epoch += 1
        self._purge(gone, rewind=False)

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next; inside ``on_assigned`` it sets the start offset."""
        tp = (partition[0], partition[1])
        if tp in self._assigning:
            self._pending_seeks[tp] = offset
            return
        super().seek(partition, offset)

    # -- commits ---------------------------------------------------------------------------------
    async def commit(self, offsets: Mapping[TP, int]) -> None:
        """Commit, per partition, the next offset to read (partitions not assigned are skipped).

        Concurrent calls are coalesced into one commit request. Raises ``AckError`` when the broker
        refuses the commit of a partition this member still owns.
        """
        if self.closed:
            log.debug("%s: commit after close dropped: %s", self.name, dict(offsets))
            return
        live = {}
        for tp, offset in offsets.items():
            key = (tp[0], tp[1])
            if key in self.assigned:
                live[key] = offset
            else:
                log.debug("%s: not committing %s: not assigned to this member", self.name, key)
        if not live:
            return
        loop = asyncio.get_running_loop()
        future: asyncio.Future[None] = loop.create_future()
        self._pending_commits.update(live)
        self._commit_waiters.append((future, tuple(live)))
        self._wake_pacing()
        if self._commit_task is None:
            self._commit_task = loop.create_task(self._commit_rounds())
        await future

    def commit_soon(self, tp: TP, offset: int) -> None:
        """Queue the commit of ``offset`` for ``tp`` and return: it goes out with the next round.

        Rounds run back to back while commits are queued, so acks that arrive while one is in
        flight are merged into the next. A refused commit is logged; a later ack of the partition
        supersedes it, and :meth:`flush` (called by revoke and close) sends it again, waits for it
        and raises a refusal.
        """
        if self.closed:
            log.debug("%s: commit of %s at %d after close dropped", self.name, tp, offset)
            return
        self._pending_commits[tp] = offset
        if self._commit_task is None:
            self._commit_task = asyncio.get_running_loop().create_task(self._commit_rounds())

    async def flush(self) -> None:
        """Wait until the broker has the commit of every record acked so far (``AckError`` if refused)."""
        if self._pending_commits and not self._commit_waiters:
            # Acks queued without waiting: sent now, synchronously (ahead of any read-ahead).
            await self.commit(dict(self._pending_commits))
        await self._drain_commits()  # the rounds already queued or in flight (no second request)
        unconfirmed = {tp: c.acked for tp, c in self.committers.items() if c.acked > c.confirmed}
        if unconfirmed:  # refused before: send again, raise a refusal
            await self.commit(unconfirmed)

    def _wake_pacing(self) -> None:
        if self._pace is not None:
            resolve(self._pace, None)

    async def _flush_quietly(self) -> None:
        try:
            await self.flush()
        except Exception as exc:  # the next owner reads those records again (at-least-once)
            log.warning("%s: the last commits failed: %r", self.name, exc)

    def _sdk_owned(self, offsets: dict[TP, int]) -> tuple[dict[TP, int], list[TP]]:
        """Split ``offsets`` (worker thread) into those safe to send and the partitions refused.

        Outside the SDK consumer's close every commit is safe. Inside it, commits come from a
        rebalance callback that ``Consumer.close()`` serves, and only those of partitions the
        SDK still had assigned when the callback began (:meth:`_close_owned_now`) are sent: the
        others are refused unsent, and their records are read again by the next owner (an
        allowed duplicate, never a loss).
        """
        if not self._sdk_closing:
            return offsets, []
        owned = self._close_owned if self._close_owned is not None else self._close_owned_now()
        safe = {tp: offset for tp, offset in offsets.items() if tp in owned}
        return safe, sorted(tp for tp in offsets if tp not in owned)

    def _close_owned_now(self) -> set[TP]:
        """The partitions the SDK has assigned, asked (worker thread) as a callback served by close begins.

        librdkafka's close does not wait for a rebalance callback queued before the close began
        (an eager revoke the member had not polled yet): it unassigns everything and terminates
        the group meanwhile. A commit reaching the group once it decided to terminate aborts the
        process (``rd_kafka_cgrp_terminated`` asserts ``wait_commit_cnt == 0``) or is never
        answered (a synchronous commit then hangs the close). The assignment, asked through the
        group's own queue, is answered after the close's terminate request (the queue is served
        in order): a partition still in it keeps the group from terminating until this callback
        has returned, so committing it is safe; a partition no longer in it was let go. The
        answer holds for the whole callback: once terminating, only the application's own
        assign calls (made after the callback) change the assignment. Asked again for every
        commit, a question sent just as the group terminates would go unanswered.
        """
        try:
            return {(p.topic, p.partition) for p in self.consumer.assignment()}
        except Exception as exc:  # the group is gone already: nothing is safe to send
            log.debug("%s: the assignment is unknown during close: %r", self.name, exc)
            return set()

    def _commit_async(self, offsets: dict[TP, int]) -> None:
        safe, refused = self._sdk_owned(offsets)
        if refused:  # flush() sends them again, and reports the refusal
            log.warning("%s: commit of %s refused: the group is terminating", self.name, refused)
        if safe:
            self.consumer.commit(
                offsets=[self._sdk_tp(tp, offset) for tp, offset in safe.items()], asynchronous=True
            )

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        """The SDK's commit report (worker thread, inside ``consume``): confirmed offsets go to the loop."""
        if self._user_on_commit is not None:
            try:
                self._user_on_commit(error, partitions)
            except Exception as exc:
                log.warning("%s: the on_commit callback failed: %r", self.name, exc)
        loop = self._loop
        if loop is None or loop.is_closed():
            return
        results = [(p.topic, p.partition, p.offset, p.error) for p in partitions]
        try:
            loop.call_soon_threadsafe(self._committed, error, results)
        except RuntimeError:  # the loop closed meanwhile
            pass

    def _committed(self, error: Any, results: list[tuple[str, int, int, Any]]) -> None:
        failed = []
        for topic, partition, offset, partition_error in results:
            tp = (topic, partition)
            committer = self.committers.get(tp)
            if committer is None:
                continue  # revoked meanwhile
            if error is None and partition_error is None:
                if offset > committer.confirmed:
                    committer.confirmed = offset
            elif (partition_error or error).name() != "_NO_OFFSET":
                failed.append((tp, partition_error or error))
        if failed:  # not confirmed: the next flush (commit(), revoke, close) sends it again
            log.warning(
                "%s: commit of %s failed: %s", self.name, sorted(tp for tp, _ in failed), failed[0][1]
            )

    def _commit_sync(self, offsets: dict[TP, int]) -> tuple[list[Any], list[TP]]:
        """Commit and wait: the SDK's per-partition results, and the partitions refused unsent."""
        safe, refused = self._sdk_owned(offsets)
        if not safe:
            return [], refused
        result: list[Any] = self.consumer.commit(
            offsets=[self._sdk_tp(tp, offset) for tp, offset in safe.items()], asynchronous=False
        )
        return result, refused

    async def _commit_rounds(self) -> None:
        loop = asyncio.get_running_loop()
        try:
            while self._pending_commits:
                if not self._commit_waiters:  # acks that do not wait: one commit per interval
                    wait = self._last_quiet_commit + COMMIT_INTERVAL - loop.time()
                    if wait > 0:
                        pace = self._pace = loop.create_future()
                        timer = loop.call_later(wait, resolve, pace, None)
                        try:
                            await pace  # woken early by a waiting commit() or flush()
                        finally:
                            timer.cancel()
                            self._pace = None
                        continue
                offsets, self._pending_commits = self._pending_commits, {}
                waiters, self._commit_waiters = self._commit_waiters, []
                failed: dict[TP, BaseException] = {}
                live = {tp: offset for tp, offset in offsets.items() if tp in self.assigned}
                if live and not waiters:
                    # Nobody waits: sent asynchronously, so the worker goes on fetching at once;
                    # the SDK's report confirms it (_on_commit), and flush() commits again, and
                    # waits, whatever is not confirmed by then.
                    self._last_quiet_commit = loop.time()
                    sent = self.thread.submit(self._commit_async, live)
                    self._send_read_ahead()
                    try:
                        await sent
                    except Exception as exc:
                        log.warning("%s: commit of %s failed: %r", self.name, sorted(live), exc)
                    continue
                if live:
                    try:
                        job = self.thread.submit(self._commit_sync, live)
                        self._send_read_ahead()  # queued behind the commit, never before it
                        results, refused = await job
                        for tp in refused:
                            failed[tp] = AckError(
                                f"commit of {TopicPartition(*tp)} refused: the consumer is leaving "
                                "and the group has already taken the partition back; its records "
                                "are read again by the next owner"
                            )
                        for result in results:
                            if result.error is not None:
                                failed[(result.topic, result.partition)] = translate(
                                    result.error, "commit failed", AckError
                                )
                    except Exception as exc:
                        error: BaseException = (
                            translate(exc, "commit failed", AckError)
                            if error_of(exc) is not None
                            else AckError(f"commit failed: {exc!r}")
                        )
                        error.__cause__ = exc
                        failed = dict.fromkeys(live, error)
                    for tp, offset in live.items():
                        committer = self.committers.get(tp)
                        if committer is not None and tp not in failed and offset > committer.confirmed:
                            committer.confirmed = offset
                    waited = {tp for _, tps in waiters for tp in tps}
                    unwaited = sorted(tp for tp in failed if tp not in waited)
                    if unwaited:  # queued by acks that did not wait: sent again by the next flush
                        log.warning("%s: commit of %s failed: %r", self.name, unwaited, failed[unwaited[0]])
                for future, tps in waiters:
                    if future.done():
                        continue
                    # A partition revoked meanwhile: its commit is dropped, not an error.
                    errors = [failed[tp] for tp in tps if tp in failed and tp in self.assigned]
                    if errors:
                        future.set_exception(errors[0])
                    else:
                        future.set_result(None)
        finally:
            self._commit_task = None
            if self._ahead_wanted:
                self._send_read_ahead()

    async def _drain_commits(self) -> None:
        task = self._commit_task
        if task is not None:
            await asyncio.gather(asyncio.shield(task), return_exceptions=True)

    async def group_metadata(self) -> Any:
        """The SDK's consumer group metadata (for ``send_offsets`` in a transaction)."""
        return await self.thread.submit(self.consumer.consumer_group_metadata)

    def _topics_exist(self) -> bool:
        """True when a subscribed topic exists (then librdkafka is joining the group for it)."""
        metadata = self.consumer.list_topics(timeout=2.0)
        return any(name in metadata.topics and metadata.topics[name].error is None for name in self.topics)

    def _serve_join(self) -> None:
        self.consumer.consume(1, POLL_SLICE)  # serves the rebalance callbacks; records are dropped

    async def _before_leave(self) -> None:
        """Let a join in flight finish before leaving the group.

        Closed while its JoinGroup is in flight, librdkafka queues the LeaveGroup behind it and
        times it out: some brokers (Tansu) then keep the departed member in the group and every
        later member of that group waits for it, for minutes (a subscription reopened after such
        a close received nothing). So a member that has not been assigned yet, of a topic that
        exists, keeps serving the join (up to :meth:`join_wait`; a join on those brokers takes
        about half a session timeout) and then leaves properly. The same holds for a member caught in a
        rebalance (another member left, so this one revoked and is rejoining): on Tansu a member
        that left with its rejoin in flight stays in the group as its leader, and every later join
        then fails at SyncGroup for good. Records fetched meanwhile are not handed out or
        committed: the group reads them again.
        """
        if (self.joined and not self.rejoining) or self.closed or self._refused:
            return  # (refused: the broker never let this client in, there is no join to finish)
        if not await self.thread.submit(self._topics_exist):
            return  # no topic, no join: librdkafka waits for the metadata and leaves cleanly
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.join_wait()
        while (not self.joined or self.rejoining) and loop.time() < deadline:
            await self.thread.submit(self._serve_join)
        if not self.joined or self.rejoining:
            log.warning("%s: closing with the group join still in flight", self.name)

    def join_wait(self) -> float:
        """The longest ``close()`` serves a group join in flight, in seconds.

        ``JOIN_WAIT_SESSIONS`` session timeouts, at most ``close_timeout``: long enough for a join
        that progresses, short enough that a join which cannot finish (a member of the group that
        never rejoins; Tansu's coordinator, which sometimes never completes the next join of a group
        whose members all left) does not hold the close for the whole ``close_timeout``:
        librdkafka's own close gives up such a join within about a second.
        """
        return min(self.close_timeout, JOIN_WAIT_SESSIONS * self.session_timeout)

    def _leave_bound(self) -> float:
        # the join served up to join_wait(), plus the metadata request (2 s at most) before it
        if self._refused:
            return self._close_bound()
        return self.join_wait() + 5.0

    async def _before_close(self) -> None:
        await self._flush_quietly()

    def _after_close(self) -> None:
        self._retire(set(self.assigned))


class ReaderCore(_CoreBase):
    """Assigned partitions at explicit offsets; no group, no commits."""

    def __init__(self, config: dict[str, Any], *, name: str, prefetch: int, close_timeout: float) -> None:
        config = dict(config)
        config.setdefault("group.id", f"polybroker-reader-{uuid.uuid4().hex}")
        super().__init__(config, name=name, prefetch=prefetch, close_timeout=close_timeout)
        #: Next offset per assigned partition (a negative sentinel until the first record).
        self.positions: dict[TP, int] = {}

    def owns(self, tp: TP) -> bool:
        """True while ``tp`` is assigned to this reader."""
        return tp in self.positions

    def _took(self, messages: list[Any]) -> None:
        positions = self.positions
        for message in messages:
            positions[(message.topic(), message.partition())] = message.offset() + 1

    def assign(self, positions: Mapping[TopicPartition, int]) -> None:
        """Add partitions, each read from its offset (or OFFSET_BEGINNING / OFFSET_END)."""
        if self.closing:
            raise ClosedError(f"the Kafka reader {self.name} is closed")
        add: list[Any] = []
        for partition, offset in positions.items():
            tp = (partition[0], partition[1])
            if offset < 0 and offset not in (OFFSET_BEGINNING, OFFSET_END):
                raise ConfigError(f"bad offset {offset} for {TopicPartition(*tp)}")
            if tp in self.positions:
                self.seek(TopicPartition(*tp), offset)
                self.positions[tp] = offset
                continue
            self.positions[tp] = offset
            # Records of an earlier assignment of tp, fetched before now, must not be handed out.
            self._epoch += 1
            self._seeked[tp] = self._epoch
            add.append(self._sdk_tp(tp, offset))
        if add:
            self.thread.post(self.consumer.incremental_assign, add)

    def unassign(self, partitions: Sequence[TopicPartition]) -> None:
        """Stop reading ``partitions``."""
        gone = {(p[0], p[1]) for p in partitions} & set(self.positions)
        if not gone:
            return
        for tp in gone:
            del self.positions[tp]
            self.paused.discard(tp)
        self._epoch += 1
        self._purge(gone, rewind=False)
        self.thread.post(self.consumer.incremental_unassign, [self._sdk_tp(tp) for tp in gone])

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        super().seek(partition, offset)
        self.positions[(partition[0], partition[1])] = offset

    def position(self, partition: TopicPartition) -> int:
        """The next offset returned for ``partition``.

        Right after assigning at OFFSET_BEGINNING or OFFSET_END, and before the first record of
        the partition arrives, this is still that sentinel: the broker resolves it when fetching.
        """
        try:
            return self.positions[(partition[0], partition[1])]
        except KeyError:
            raise UnknownTopic(f"{TopicPartition(*partition)} is not assigned to this reader") from None

    async def records(self, max_records: int, timeout: float | None) -> list[Record]:
        """Up to ``max_records`` records; their ``ack()`` does nothing (readers never commit)."""
        messages = await self.fetch(max_records, timeout)
        if not messages:
            return []
        return to_records(messages, {}, _READER, time.time())
