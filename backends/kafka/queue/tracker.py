"""The redelivery tracker: watches the markers topic and re-sends messages whose deadline passed.

Trackers share the markers partitions through their own consumer group, so several can run for
fail-over. Per partition the tracker keeps a :class:`MarkersQueue`, a clock that never trusts
the local wall clock (kafka-mq-go's skew-immune clock: "now" is the newest marker timestamp,
advanced by local monotonic time once markers stop arriving), and the offset to commit: the
oldest in-progress START marker's own offset, so a restarted tracker re-reads it and rebuilds its
state. A restarted tracker redelivers nothing in a partition until it has read up to the end it
saw at assignment (no spurious redeliveries while replaying).

A redelivery writes the payload back to the queue topic (with the next delivery attempt, the
first copy's id, and the queue it is for), then END for the old copy — each message with its own
exponential backoff. After ``max_deliveries`` the message goes to the dead-letter topic instead.
A message its consumer only prefetched (STARTed with ``prefetched`` and never marked handed, see
``markers``) is written back with its attempt unchanged and never dead-lettered for it: no
application saw it (counted as ``released``).

A tracker started with :meth:`RedeliveryTracker.start` is supervised: when its loop fails, the
error is logged at ERROR, counted (``tracker_failures`` in :class:`QueueMetrics`), kept in
:attr:`RedeliveryTracker.last_error`, and the loop is restarted after a bounded exponential
backoff (``restart_backoff`` seconds, doubling up to ``max_restart_backoff``). ``last_error`` and
``failure_streak`` (failures in a row) are cleared once a restarted loop completes a whole pass
(poll, track, commit, start redeliveries) without failing, and no redelivery it started is still
pending (or one has succeeded): a failure that always happens after polling adds up. The
supervised task itself never ends with an error: it ends when the tracker is closed, or when the
log underneath is closed (``ClosedError``); who runs it decides when a streak is too long.

Writes and reads of a redelivery are retried with backoff while they fail with retryable errors;
a permanent one (``ConfigError``, ``AuthenticationFailed``, ``PermissionDenied``) fails the loop
instead, so it is logged, counted and restarted like any other failure (and ``broker queue
tracker --max-failures`` can end on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import random
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import Self

from broker import Record
from broker.backends.kafka.queue.client import read_hints
from broker.backends.kafka.queue.fleet import FleetGuard, scan_for_batched
from broker.backends.kafka.queue.markers import MarkerProducer, MessageId, decode
from broker.backends.kafka.queue.markers_queue import MarkersQueue, Started, spans
from broker.backends.kafka.queue.metrics import QueueMetrics
from broker.backends.kafka.queue.producer import MessageSender
from broker.backends.kafka.queue.reader import QueueTopicReader
from broker.backends.kafka.queue.settings import (
    HEADER_ATTEMPT,
    HEADER_ORIGINAL_ID,
    HEADER_REDELIVERY_FOR,
    QueueSettings,
    RedeliveryBackoff,
)
from broker.driver.resources import AsyncResource, stop_task
from broker.errors import (
    AuthenticationFailed,
    ClosedError,
    ConfigError,
    DecodeError,
    PermissionDenied,
    UnknownTopic,
)
from broker.log import Log, LogConsumer, TopicPartition

__all__ = ["AssignedPartition", "GiveUp", "RedeliveryTracker"]

log = logging.getLogger("broker.backends.kafka.queue.tracker")


#: Errors a retry cannot fix: a redelivery failing with one fails the tracker's loop instead.
_PERMANENT: tuple[type[Exception], ...] = (ConfigError, AuthenticationFailed, PermissionDenied)

#: A message to write back: (offset of the expired copy, key, value, headers, its delivery attempt).
_Copy = tuple[int, str | None, bytes, dict[str, str], int]


class AssignedPartition:
    """One markers partition owned by this tracker: its queue, clock and catch-up state."""

    def __init__(
        self,
        tp: TopicPartition,
        config: QueueSettings,
        catch_up_to: int,
        monotonic: Callable[[], float],
        guard: FleetGuard | None = None,
    ):
        self.tp = tp
        #: Checks each marker for a Go-fleet mix that misbehaves (see ``fleet``).
        self.guard = guard
        self.config = config
        self.queue = MarkersQueue()
        self.catch_up_to = catch_up_to
        self.position = 0
        self._monotonic = monotonic
        self._last_marker_time: float | None = None
        self._seen_at = 0.0
        self.tasks: dict[Started, asyncio.Task[None]] = {}

    @property
    def caught_up(self) -> bool:
        """True once the markers present at assignment were all read."""
        return self.position >= self.catch_up_to

    def add(self, record: Record) -> None:
        """Apply one marker record (its key is the queue id)."""
        self.position = max(self.position, record.offset + 1)
        timestamp = record.publish_time if record.publish_time is not None else time.time()
        if self._last_marker_time is None or timestamp >= self._last_marker_time:
            self._last_marker_time = timestamp
            self._seen_at = self._monotonic()
        try:
            marker = decode(record.value or b"")
        except DecodeError as exc:
            log.warning("skipping a malformed marker at %s@%d: %s", self.tp, record.offset, exc)
            return
        if self.guard is not None:
            self.guard.check(self.tp, record.offset, marker)
        self.queue.add(marker, record.key or "", record.offset, timestamp)

    def now(self) -> float | None:
        """The partition's clock (None until a marker was seen)."""
        if self._last_marker_time is None:
            return None
        elapsed = self._monotonic() - self._seen_at
        if elapsed <= self.config.use_now_if_no_marker_seen:
            return self._last_marker_time
        return self._last_marker_time + elapsed

    def commit_offset(self) -> int | None:
        """What to commit: the oldest in-progress START (re-read on restart), else the read position."""
        smallest = self.queue.smallest_offset()
        if smallest is not None:
            return smallest
        return self.position or None


def _forget(tasks: dict[Started, asyncio.Task[None]], entry: Started, _task: asyncio.Task[None]) -> None:
    tasks.pop(entry, None)


def _is_permanent(exc: BaseException) -> bool:
    return isinstance(exc, _PERMANENT)


#: The default first wait of a retried redelivery step (``RedeliveryBackoff.start``).
_DEFAULT_START = 0.05


class _GaveUp(Exception):
    """A retried step failed for longer than the policy's ``max_elapsed`` (``__cause__``: the last error)."""


@dataclass(frozen=True, slots=True)
class GiveUp:
    """A redelivery the tracker gave up on (``RedeliveryBackoff.max_elapsed`` passed), as reported."""

    #: The queue the messages are for.
    queue_id: str
    #: The queue topic partition and offsets of the messages.
    partition: int
    offsets: tuple[int, ...]
    #: What failed (``redelivery``, ``reading back``, ``writing END``, ``dead-lettering``).
    step: str
    #: The last error.
    error: BaseException
    #: True when the messages were dead-lettered instead (only the report then).
    dead_lettered: bool = False


class RedeliveryTracker(AsyncResource):
    """Tracks markers and redelivers expired messages. Run it as a task or ``async with``."""

    def __init__(
        self,
        log_port: Log,
        config: QueueSettings,
        *,
        metrics: QueueMetrics | None = None,
        monotonic: Callable[[], float] = time.monotonic,
        max_backoff: float = 30.0,
    ) -> None:
        self._log = log_port
        self.config = config
        self.metrics = metrics or QueueMetrics()
        self._monotonic = monotonic
        self._max_backoff = max_backoff
        #: Warns about Go-fleet mixes that misbehave, from the markers read (see ``fleet``).
        self.fleet = FleetGuard(config, self.metrics)
        self._fleet_scan: asyncio.Task[None] | None = None
        #: Called with a :class:`GiveUp` each time the tracker gives up on a redelivery.
        self.on_give_up: Callable[[GiveUp], None] | None = None
        self._markers = MarkerProducer(log_port, config)
        self._sender = MessageSender(log_port)
        self._reader = QueueTopicReader(log_port)
        #: The queue topic's partition count (looked up on the first queue-mode redelivery).
        self._topic_partitions: int | None = None
        self.partitions: dict[TopicPartition, AssignedPartition] = {}
        self._consumer: LogConsumer | None = None
        self._adds = 0
        self._task: asyncio.Task[None] | None = None
        self._closed = False
        #: Seconds a closing tracker gives its redeliveries in flight to write their END.
        self.shutdown_grace = 5.0
        #: The error that ended the loop last (None while it runs healthy).
        self.last_error: BaseException | None = None
        #: Loop failures in a row (reset by a pass completed without failure, see the module doc).
        self.failure_streak = 0
        #: A permanent error of a redelivery task, raised by the loop's next pass.
        self._failure: BaseException | None = None
        #: Whether a redelivery of the current loop has succeeded.
        self._redelivered = False
        #: First delay before a failed loop is restarted, doubled per failure up to the maximum.
        self.restart_backoff = 0.1
        self.max_restart_backoff = 10.0
        #: Called with the error each time the loop fails (after logging and counting it).
        self.on_failure: Callable[[BaseException], None] | None = None

    @property
    def backoff(self) -> RedeliveryBackoff:
        """How redeliveries are retried and when the tracker gives up on one (kafka-mq-go's policy).

        ``config.redelivery_backoff``, else the defaults with waits capped at ``max_backoff``.
        """
        policy = self.config.redelivery_backoff
        if policy is not None:
            return policy
        return RedeliveryBackoff(maximum=max(self._max_backoff, _DEFAULT_START))

    # -- rebalance listener ---------------------------------------------------------------
    async def on_assigned(self, partitions: Sequence[TopicPartition]) -> None:
        """Start tracking ``partitions``; their committed position and end decide catch-up.

        On Kafka this runs in a task of its own, which closing the tracker does not cancel: a
        tracker closed meanwhile (its consumer leaving the group during the join) asks the
        cluster nothing more and tracks nothing, so its consumer's close is not held up by
        requests whose answers nobody needs, on a log that may be closing too.
        """
        if self._closed:
            return
        committed = await self._log.committed(self.config.tracker_group, list(partitions))
        for tp in partitions:
            if self._closed:
                return
            try:
                _, high = await self._watermarks(tp)
            except ClosedError:
                if self._closed:
                    return
                raise
            state = AssignedPartition(tp, self.config, high, self._monotonic, self.fleet)
            state.position = committed.get(tp) or 0
            self.partitions[tp] = state

    async def on_revoked(self, partitions: Sequence[TopicPartition]) -> None:
        """Commit and stop tracking ``partitions`` (their redeliveries in progress are cancelled)."""
        await self.commit([tp for tp in partitions if tp in self.partitions])
        for tp in partitions:
            state = self.partitions.pop(tp, None)
            if state is not None:
                for task in state.tasks.values():
                    task.cancel()

    async def _watermarks(self, tp: TopicPartition) -> tuple[int, int]:
        """The watermarks of a markers partition (a topic created a moment ago may need retries)."""
        delay = 0.05
        for _ in range(8):
            if self._closed:
                raise ClosedError("the redelivery tracker is closed")
            try:
                return await self._log.watermarks(tp)
            except UnknownTopic as exc:
                log.debug("watermarks of %s: %r; retrying", tp, exc)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 1.0)
        return await self._log.watermarks(tp)

    # -- the loop -------------------------------------------------------------------------
    async def _create_topics(self) -> None:
        """The markers topic (with the message topic's partition count), and the message topic.

        Only where the log may create topics (its ``provision`` is ``create``, the default): under
        ``verify`` and ``none`` both must exist, and a missing one is the log's ``UnknownTopic``.
        """
        if getattr(self._log, "provision", "create") != "create":
            await self._log.partitions(self.config.message_topic)
            await self._log.partitions(self.config.marker_topic)
            return
        partitions = await self._partitions_of_message_topic()
        try:
            await self._log.create_topic(self.config.marker_topic, partitions)
        except ConfigError:
            # It exists with another partition count (made by another deployment, or auto-created
            # by a producer first): any count works, markers are keyed by queue id.
            await self._log.partitions(self.config.marker_topic)

    async def run(self) -> None:
        """Track until cancelled or closed."""
        await self._create_topics()
        if self.config.go_fleet and self._fleet_scan is None:
            # Markers of a queue may all sit in a partition a Go tracker owns: look once at every tail.
            self._fleet_scan = asyncio.get_running_loop().create_task(
                scan_for_batched(self._log, self.fleet), name="tracker-fleet-scan"
            )
        self._consumer = self._markers_consumer()
        self._failure, self._redelivered = None, False
        try:
            while not self._closed:
                self._raise_failure()
                records = await self._consumer.poll(1000, self._poll_timeout())
                for record in records:
                    state = self.partitions.get(TopicPartition(record.topic, record.partition))
                    if state is not None:
                        state.add(record)
                        self._adds += 1
                if self._adds >= self.config.num_offsets_per_commit:
                    await self.commit(list(self.partitions))
                self._redeliver_expired()
                self._raise_failure()
                self._pass_completed()
        except ClosedError:
            pass
        finally:
            await self._shutdown()

    def _raise_failure(self) -> None:
        """Fail the loop with a redelivery's permanent error (the supervisor counts it)."""
        failure, self._failure = self._failure, None
        if failure is not None:
            raise failure

    def _pass_completed(self) -> None:
        """End the failure streak: a pass completed, and no redelivery is pending or one succeeded."""
        if not self.failure_streak and self.last_error is None:
            return
        if self._redelivered or not any(state.tasks for state in self.partitions.values()):
            self.last_error = None
            self.failure_streak = 0

    def _redelivery_done(self, task: asyncio.Task[None]) -> None:
        if task.cancelled():
            return
        error = task.exception()
        if error is None:
            self._redelivered = True
        elif self._failure is None:
            self._failure = error
        else:
            log.debug("another redelivery failed too: %r", error)

    def _markers_consumer(self) -> LogConsumer:
        # Markers are a few dozen bytes: with the connection's fetch settings the broker could hold
        # the last ones for its fetch wait (0.5 s on Kafka), and redeliveries would be that late. At
        # most 0.1 s late, and in chunks of a few KiB when markers flow fast (not one by one). The
        # session follows the redelivery timeout: a crashed tracker's partitions move on.
        hints = replace(read_hints(self.config, min_bytes=4096), max_wait=0.1)
        group, topics = self.config.tracker_group, [self.config.marker_topic]
        return self._log.consumer(group, topics, listener=self, hints=hints)

    async def _partitions_of_message_topic(self) -> int:
        try:
            return await self._log.partitions(self.config.message_topic)
        except UnknownTopic:
            pass
        try:
            await self._log.create_topic(self.config.message_topic, 1)
        except ConfigError:
            pass  # created meanwhile (by a producer, with the broker's default count)
        return await self._log.partitions(self.config.message_topic)

    def _poll_timeout(self) -> float:
        timeout = self.config.tracker_poll_interval
        for state in self.partitions.values():
            deadline = state.queue.next_deadline()
            now = state.now()
            if deadline is not None and now is not None:
                # at least 10 ms: a clock held at the newest marker's time may not move for a while
                timeout = min(timeout, max(0.01, deadline - now))
        return timeout

    def _redeliver_expired(self) -> None:
        for state in self.partitions.values():
            if not state.caught_up:
                continue
            now = state.now()
            if now is None:
                continue
            for entry, offsets in state.queue.to_redeliver(now):
                if not offsets:
                    continue
                task = asyncio.get_running_loop().create_task(self._redeliver(entry, offsets))
                state.tasks[entry] = task
                task.add_done_callback(functools.partial(_forget, state.tasks, entry))
                task.add_done_callback(self._redelivery_done)

    async def _retry(
        self,
        what: str,
        attempt: Callable[[], Awaitable[object]],
        *,
        max_backoff: float | None = None,
        give_up: bool = False,
    ) -> None:
        """Run ``attempt`` until it succeeds, waiting per :attr:`backoff` between failures.

        Permanent errors are raised at once. With ``give_up``, a step still failing after the
        policy's ``max_elapsed`` seconds raises ``_GaveUp`` (its cause: the last error).
        """
        policy = self.backoff
        ceiling = policy.maximum if max_backoff is None else min(max_backoff, policy.maximum)
        began = self._monotonic()
        retry = 0
        while True:
            try:
                await attempt()
                return
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if _is_permanent(exc):
                    log.error("%s failed: %r; not retried (a permanent error)", what, exc)
                    raise
                retry += 1
                delay = policy.wait(retry, random.random(), ceiling)
                limit = policy.max_elapsed
                if give_up and limit is not None and self._monotonic() - began + delay > limit:
                    raise _GaveUp(f"{what} still failing after {self._monotonic() - began:.1f}s") from exc
                log.warning("%s failed: %r; retrying in %.2fs", what, exc, delay)
                await asyncio.sleep(delay)

    def _gave_up(self, report: GiveUp) -> None:
        """Report a redelivery given up on: ERROR log, ``abandoned`` count, ``on_give_up``."""
        if report.dead_lettered:
            log.error(
                "queue %r: gave up redelivering %d message(s) of partition %d after %s failed for "
                "over %ss (%r); dead-lettered them",
                report.queue_id,
                len(report.offsets),
                report.partition,
                report.step,
                self.backoff.max_elapsed,
                report.error,
            )
        else:
            self.metrics.count("abandoned", len(report.offsets))
            log.error(
                "queue %r: gave up redelivering message(s) %s of partition %d after %s failed for over "
                "%ss (%r); they stay started and a restarted tracker tries again",
                report.queue_id,
                list(report.offsets[:10]),
                report.partition,
                report.step,
                self.backoff.max_elapsed,
                report.error,
            )
        if self.on_give_up is not None:
            try:
                self.on_give_up(report)
            except Exception:
                log.exception("the tracker's on_give_up callback raised")

    async def _copies(self, entry: Started, offsets: list[int]) -> list[_Copy]:
        """What to re-send for ``offsets`` of ``entry``: from its START, or read back from the topic."""
        marker = entry.marker
        if marker is not None:  # a per-message START carries the message
            key = marker.key.decode(errors="replace") or None
            attempt = marker.delivery_attempt or 1
            return [(offsets[0], key, marker.value, dict(marker.headers), attempt)]
        tp = TopicPartition(self.config.message_topic, entry.partition)
        read: list[tuple[dict[int, Record], list[int]]] = []

        async def read_back() -> None:
            read.append(await self._reader.read(tp, offsets))

        await self._retry(f"reading {tp} back", read_back, max_backoff=2.0, give_up=True)
        found, gone = read[-1]
        if gone:
            self.metrics.count("unrecoverable", len(gone))
            log.warning(
                "queue %r: %d message(s) of %s are no longer in the log (retention?) and cannot be "
                "redelivered: offsets %s",
                entry.queue_id,
                len(gone),
                tp,
                gone[:10],
            )
        copies: list[_Copy] = []
        for offset in sorted(found):
            record = found[offset]
            headers = dict(record.attributes) if record.attributes else {}
            attempt = int(headers.get(HEADER_ATTEMPT, "1") or 1)
            copies.append((offset, record.key, record.value or b"", headers, attempt))
        return copies

    async def _redeliver(self, entry: Started, offsets: list[int]) -> None:
        """Re-send (or dead-letter) the messages ``entry`` still owns, then END them."""
        queue_id, partition, marker = entry.queue_id, entry.partition, entry.marker
        handed = entry.handed  # read now: a hand-out mark may arrive while this runs
        try:
            copies = await self._copies(entry, offsets)
        except _GaveUp as gave_up:  # the messages cannot be read back: nothing to re-send or dead-letter
            self._gave_up(
                GiveUp(queue_id, partition, tuple(offsets), "reading back", gave_up.__cause__ or gave_up)
            )
            return
        spread = any(key == queue_id for _, key, _, _, _ in copies) and await self._spread_over() > 0
        sent: set[int] = set()

        async def send_all() -> None:
            writes = []
            for offset, key, value, headers, attempt in copies:
                if offset not in sent:
                    writes.append(
                        (
                            offset,
                            self._resend(
                                queue_id,
                                partition,
                                offset,
                                key,
                                value,
                                headers,
                                attempt,
                                handed,
                                random.randrange(self._topic_partitions or 1) if spread else None,
                            ),
                        )
                    )
            results = await asyncio.gather(*(w for _, (_, w) in writes), return_exceptions=True)
            failure: BaseException | None = None
            for (offset, (outcome, _)), result in zip(writes, results, strict=True):
                if isinstance(result, BaseException):
                    failure = failure or result
                else:
                    sent.add(offset)
                    self.metrics.count(outcome)
            if failure is not None:
                raise failure

        try:
            await self._retry("redelivery", send_all, give_up=True)
        except _GaveUp as gave_up:
            error = gave_up.__cause__ or gave_up
            unsent = [copy for copy in copies if copy[0] not in sent]
            if not await self._dead_letter_given_up(queue_id, partition, unsent, error):
                return  # reported; no END: the messages stay started
        try:
            if marker is not None:
                mids = [MessageId(partition, offsets[0])]
                await self._retry(
                    "writing END", lambda: asyncio.gather(*self._markers.end(queue_id, mids)), give_up=True
                )
            else:
                ranges = [(partition, first, last) for first, last in spans(offsets)]
                await self._retry(
                    "writing END", lambda: self._markers.end_batch(queue_id, ranges), give_up=True
                )
        except _GaveUp as gave_up:
            # The copy was sent: without END the old one is redelivered again later (a duplicate).
            self._gave_up(
                GiveUp(queue_id, partition, tuple(offsets), "writing END", gave_up.__cause__ or gave_up)
            )

    async def _dead_letter_given_up(
        self, queue_id: str, partition: int, unsent: list[_Copy], error: BaseException
    ) -> bool:
        """Dead-letter the copies a redelivery gave up on; False (and reported) when it cannot."""
        offsets = tuple(copy[0] for copy in unsent)
        target = self.config.dead_letter_topic
        if target is None or not unsent:
            self._gave_up(GiveUp(queue_id, partition, offsets, "redelivery", error))
            return not unsent
        reason = f"redelivery failed for over {self.backoff.max_elapsed}s: {error!r}"

        async def dead_letter() -> None:
            writes = []
            for offset, key, value, headers, attempt in unsent:
                out = dict(headers)
                out.setdefault(HEADER_ORIGINAL_ID, f"{partition}:{offset}")
                for name in (HEADER_ATTEMPT, HEADER_REDELIVERY_FOR):
                    out.pop(name, None)
                out["dead_letter_reason"] = reason
                out["delivery_attempts"] = str(attempt)
                writes.append(self._sender.send(target, value, key=key, headers=out))
            await asyncio.gather(*writes)

        try:
            await self._retry("dead-lettering", dead_letter, give_up=True)
        except _GaveUp as gave_up:
            self._gave_up(
                GiveUp(queue_id, partition, offsets, "dead-lettering", gave_up.__cause__ or gave_up)
            )
            return False
        self.metrics.count("dead_lettered", len(unsent))
        self._gave_up(GiveUp(queue_id, partition, offsets, "redelivery", error, dead_lettered=True))
        return True

    async def _spread_over(self) -> int:
        """How many queue topic partitions queue-mode redeliveries spread over (0: unknown, by key).

        In queue mode every record's key is the queue id; written by key, every redelivery of a
        queue would land in one partition (and on one consumer). kafka-mq-go's producer spreads
        them with librdkafka's ``random`` partitioner; so do we, as the queue producer does.
        """
        if self._topic_partitions is None:
            topic = self.config.message_topic
            try:
                self._topic_partitions = await self._log.partitions(topic)
            except Exception as exc:  # not known yet: by key this time, asked again next time
                log.debug("partitions of %r unknown (%r): redelivering by key", topic, exc)
                return 0
        return self._topic_partitions

    def _resend(
        self,
        queue_id: str,
        partition: int,
        offset: int,
        key: str | None,
        value: bytes,
        headers: dict[str, str],
        attempt: int,
        handed: bool = True,
        target_partition: int | None = None,
    ) -> tuple[str, Awaitable[object]]:
        """Write one message back to the queue topic (or to the dead-letter topic past the limit).

        ``handed=False``: no application saw this copy; the same attempt is written back.
        ``target_partition``: the queue topic partition to write to (None: by key).
        Returns the metric to count once the write succeeded, and the write.
        """
        topic = self.config.message_topic
        headers.setdefault(HEADER_ORIGINAL_ID, f"{partition}:{offset}")
        if not handed:
            if attempt > 1:
                headers[HEADER_ATTEMPT] = str(attempt)
            headers[HEADER_REDELIVERY_FOR] = queue_id
            write = self._sender.send(topic, value, key=key, headers=headers, partition=target_partition)
            return "released", write
        limit = self.config.max_deliveries
        if limit is not None and attempt + 1 > limit:
            target = self.config.dead_letter_topic
            for name in (HEADER_ATTEMPT, HEADER_REDELIVERY_FOR):
                headers.pop(name, None)
            headers["dead_letter_reason"] = f"not acknowledged after {limit} deliveries"
            headers["delivery_attempts"] = str(attempt)
            if target is None:
                log.warning(
                    "dropping message %s:%s of queue %r after %d deliveries",
                    partition,
                    offset,
                    queue_id,
                    limit,
                )
                return "dead_lettered", asyncio.sleep(0)
            return "dead_lettered", self._sender.send(target, value, key=key, headers=headers)
        headers[HEADER_ATTEMPT] = str(attempt + 1)
        headers[HEADER_REDELIVERY_FOR] = queue_id
        return "redelivered", self._sender.send(
            topic, value, key=key, headers=headers, partition=target_partition
        )

    async def commit(self, partitions: Sequence[TopicPartition]) -> None:
        """Commit what is safe for ``partitions`` (failures are logged; the next commit retries)."""
        self._adds = 0
        consumer = self._consumer
        if consumer is None:
            return
        offsets = {}
        for tp in partitions:
            state = self.partitions.get(tp)
            offset = state.commit_offset() if state is not None else None
            if offset is not None:
                offsets[tp] = offset
        if offsets:
            try:
                await consumer.commit(offsets)
            except Exception as exc:
                log.warning("tracker commit failed: %r", exc)

    async def _shutdown(self) -> None:
        scan = self._fleet_scan
        if scan is not None and not scan.done():
            scan.cancel()
            await asyncio.gather(scan, return_exceptions=True)
        tasks = [t for state in self.partitions.values() for t in state.tasks.values()]
        if tasks:
            # A redelivery cut between re-sending and its END is re-sent by the next tracker: a
            # duplicate. Let those in flight finish (bounded), then cancel what is stuck.
            _, stuck = await asyncio.wait(tasks, timeout=self.shutdown_grace)
            for task in stuck:
                task.cancel()
            await asyncio.gather(*stuck, return_exceptions=True)
        if self._consumer is not None:
            try:  # bounded: a consumer stuck in its SDK must not hang close (markers are re-read)
                async with asyncio.timeout(self.shutdown_grace):
                    await self.commit(list(self.partitions))
            except TimeoutError:
                log.warning("the tracker's last commit did not finish within %ss", self.shutdown_grace)
            with contextlib.suppress(Exception):
                await self._consumer.close()
        with contextlib.suppress(Exception):
            await self._reader.close()

    # -- as a resource --------------------------------------------------------------------
    def start(self) -> asyncio.Task[None]:
        """Run in a background task, restarted with backoff whenever it fails (see the module doc).

        The task never ends with an error: it ends when the tracker is closed or its log is.
        """
        if self._closed:
            raise ClosedError("the redelivery tracker is closed")
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._supervise(), name="redelivery-tracker")
        return self._task

    async def _supervise(self) -> None:
        while not self._closed:
            try:
                await self.run()
                return
            except asyncio.CancelledError:
                raise
            except ClosedError:
                return  # the log underneath was closed: nothing to restart on
            except Exception as exc:
                error = exc
            if self._closed:
                return
            self.last_error = error
            self.failure_streak += 1
            delay = min(self.restart_backoff * 2 ** (self.failure_streak - 1), self.max_restart_backoff)
            self.metrics.count("tracker_failures")
            log.error(
                "redelivery tracker of %r failed (%d in a row): %r; restarting in %.2fs",
                self.config.marker_topic,
                self.failure_streak,
                error,
                delay,
                exc_info=error,
            )
            if self.on_failure is not None:
                self.on_failure(error)
            self._reset_state()
            await asyncio.sleep(delay)

    def _reset_state(self) -> None:
        """Forget the partitions of a failed loop (the next one is assigned afresh)."""
        for state in self.partitions.values():
            for task in state.tasks.values():
                task.cancel()
        self.partitions = {}
        self._consumer = None
        self._adds = 0

    async def close(self) -> None:
        """Stop tracking (commits what is safe). Idempotent."""
        self._closed = True
        task, self._task = self._task, None
        await stop_task(task)  # a caller's timeout ends the wait; the task ends by itself

    @property
    def in_progress(self) -> int:
        """Messages started and not ended, over the owned partitions."""
        return sum(len(s.queue) for s in self.partitions.values())

    async def __aenter__(self) -> Self:
        self.start()
        return self
