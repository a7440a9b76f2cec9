"""The QueueConsumer: a pipelined polling loop filling a bounded buffer, keep-alives, settlement.

The loop polls the queue topic and hands each fetched batch to a finisher that writes its START
markers, waits for the batch before it, commits the read position and only then puts its messages
into the buffer. Up to ``batches_in_flight`` batches are in those steps at once, so the START and
commit round trips of one batch overlap the next batch's; their order is kept, and a failed
batch is never committed past: the batches after it are dropped and read again after
``reset()``. The buffer holds ``receive_buffer_capacity`` messages; a full buffer stops the loop
(back-pressure).

One keep-alive task writes KEEPALIVE markers each ``redelivery_timeout / 2`` — batched, never a
timer per message: with ``keepalive_received=True`` (kafka-mq-go's behaviour) for every message
from START until it is settled or :meth:`QueueConsumer.interrupt` ed; with ``False`` (the portable
``messages()``) only while it waits in the buffer, so a received message that is neither settled
nor kept alive with ``in_progress()`` is redelivered after the timeout, as on every other broker.

Hand-out marks (``QueueSettings.marks_handout``): batches are STARTed as prefetched, and a message
reaches the application only once a KEEPALIVE marking it handed out is written. Marks are written
ahead, one marker for up to ``handout_window`` buffered messages, so receiving rarely waits for
one. After a crash the tracker counts a delivery attempt only for marked messages: a message the
dead consumer had only prefetched comes back with its attempt unchanged, while one that crashed
its handler still moves towards ``max_deliveries``.

Settlement: ``ack`` writes END; ``nack(delay)`` writes a KEEPALIVE whose timeout is the delay, so
the tracker redelivers it then (kafka-mq-go's Nack was an Ack); ``in_progress`` writes a
KEEPALIVE; ``dead_letter`` publishes to the dead-letter topic and writes END. ENDs are pipelined
and merged: every ack of one event-loop pass goes into one batched END marker. ``flush()`` and
``close()`` wait for every marker. A lost END costs a duplicate, never a loss.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections import deque
from collections.abc import Sequence
from typing import Any

from broker import Message
from broker.backends.kafka.queue.client import MqClient
from broker.backends.kafka.queue.errors import is_timeout_error
from broker.backends.kafka.queue.metrics import QueueMetrics
from broker.backends.kafka.queue.producer import MessageSender
from broker.backends.kafka.queue.source import QueueSource
from broker.driver.acking import claim_ack, own_acker, start_ack_deadline
from broker.driver.resources import AsyncResource, stop_task
from broker.errors import AckError, AuthenticationFailed, BrokerError, ClosedError, PermissionDenied, Timeout
from broker.log import TopicPartition

__all__ = ["QueueConsumer"]

log = logging.getLogger("broker.backends.kafka.queue")


def _retrieve(future: asyncio.Future[Any]) -> None:
    """Done callback of a write nobody awaits any more: its failure was reported as a Timeout."""
    if not future.cancelled():
        future.exception()


async def _stop(task: asyncio.Task[Any] | None) -> None:
    await stop_task(task)  # bounded by close()'s caller: a cancelled close stops waiting


#: The fewest messages hand-out marks are written ahead of receiving.
_MIN_LEAD = 16

#: Handed-out batches kept (for keep-alives) before the settled messages among them are dropped.
_COMPACT_AFTER = 32


class _InFlight:
    """One fetched batch on its way: whether its and every earlier START is written, and its finisher."""

    __slots__ = ("started", "task")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.started: asyncio.Future[bool] = loop.create_future()
        self.task: asyncio.Task[bool]


class QueueConsumer(AsyncResource):
    """Receives the messages of one logical queue; also their :class:`~broker.message.Acker`."""

    def __init__(
        self, client: MqClient, metrics: QueueMetrics | None = None, *, keepalive_received: bool = True
    ) -> None:
        self.client = client
        self.keepalive_received = keepalive_received
        self.config = client.config
        self.metrics = metrics or QueueMetrics()
        self._capacity = self.config.receive_buffer_capacity
        self._buffer: deque[Message] = deque()
        self._marking = self.config.marks_handout
        self._window = self.config.handout_window
        #: Hand-out marks of the buffer's first messages, in order: ``[count, write]`` segments.
        self._marks: deque[list[Any]] = deque()
        self._marked_ahead = 0
        #: Messages marked ahead of receiving (adapts: about four mark round trips of messages).
        self._lead = _MIN_LEAD
        self._taken = 0
        self._rate = 0.0  # messages the application takes per second (smoothed)
        self._rtt = 0.003  # seconds a marker write takes (smoothed)
        self._sampled_at = 0.0
        self._sampled_taken = 0
        self._mark_wait = 0.0  # seconds receiving waited for marks, in all
        self._sampled_wait = 0.0
        self._written_already: asyncio.Future[Any] | None = None
        self._ready = asyncio.Event()  # set when the buffer may have messages (or on close)
        self._space = asyncio.Event()  # set when the buffer may have room (or on close)
        self._space.set()
        #: Batches handed out, for keep-alives (keepalive_received): pruned once all are settled.
        self._handed: deque[list[Message]] = deque()
        self._interrupted: set[int] = set()
        #: Records of batches started and waiting to be committed and handed out.
        self._waiting: dict[int, list[Any]] = {}
        self._in_flight = 0
        self._writes: set[asyncio.Future[Any]] = set()
        self._ending: list[Any] = []
        self._end_scheduled = False
        self._sender = MessageSender(client._log)
        self._loop_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        #: The finisher of the newest batch in flight (each one waits for the one before).
        self._pipeline: _InFlight | None = None
        self._closed = False
        #: A refusal the polling loop got (a login or an access the broker refused): ``receive``
        #: raises it while no message is buffered, and the loop keeps trying, so access granted
        #: later heals the consumer. Cleared by the next poll that succeeds.
        self._refused: BrokerError | None = None

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling loop and keep-alives (done by the first ``receive``)."""
        if self._closed:
            raise ClosedError("the queue consumer is closed")
        if self._loop_task is None:
            loop = asyncio.get_running_loop()
            self._written_already = loop.create_future()
            self._written_already.set_result(None)
            self._loop_task = loop.create_task(self._run(), name=f"queue-consumer-{self.client.queue_id}")
            self._keepalive_task = loop.create_task(self._keepalive(), name="queue-keepalive")

    async def _run(self) -> None:
        client = self.client
        config = self.config
        slots = asyncio.Semaphore(config.batches_in_flight)
        backoff = 0.05
        loop = asyncio.get_running_loop()
        while not self._closed:
            try:
                if client.needs_reconnect or client.needs_reset:
                    await self._settle_pipeline()
                    if client.needs_reconnect:
                        await client.reconnect()
                    if client.needs_reset:
                        await client.reset()
                await slots.acquire()
                try:
                    mine, positions = await client.poll(
                        config.max_messages_per_poll, config.next_message_timeout
                    )
                except BaseException:
                    slots.release()
                    raise
                backoff = 0.05
                self._refused = None
            except asyncio.CancelledError:
                raise
            except ClosedError:
                return
            except (AuthenticationFailed, PermissionDenied) as exc:
                if self._refused is None:
                    log.error("queue %r: %s; receive() raises it until a poll succeeds", client.queue_id, exc)
                self._refused = exc
                self._ready.set()  # wake receive() to raise it
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            except Exception as exc:
                # kafka-mq-go logs timeouts at debug level: they are part of polling an idle queue.
                level = logging.DEBUG if is_timeout_error(exc) else logging.WARNING
                log.log(level, "queue %r: %s; retrying in %.2fs", client.queue_id, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not positions:
                slots.release()
                continue
            current = _InFlight(loop)
            current.task = loop.create_task(self._finish(mine, positions, self._pipeline, current, slots))
            self._pipeline = current

    async def _finish(
        self,
        mine: list[Any],
        positions: dict[TopicPartition, int],
        previous: _InFlight | None,
        current: _InFlight,
        slots: asyncio.Semaphore,
    ) -> bool:
        """START, commit, then hand out, in order with the batches before. False: dropped.

        The commit is sent once this batch's and every earlier batch's STARTs are written (so
        commits of several batches merge into one request); the messages are handed out once the
        commit succeeded and the batch before was handed out. A dropped batch is not lost: its
        records are read again after ``reset()``, or redelivered by the tracker.
        """
        handed = False
        counted = self._counted_at_start(asyncio.get_running_loop().time())
        try:
            started = await self._write_start(mine, counted)  # overlaps earlier batches' commits
            if previous is not None and started:
                started = await previous.started
            current.started.set_result(started)
            committed = started and await self._commit(positions)
            if not await self._handed_out(previous) or not committed:
                return False
            owned = self._still_owned(mine, positions)
            if owned:
                # Messages are made only now: short-lived objects are cheap for the collector.
                source = self.client.source
                assert source is not None
                await self._hand_out(source.messages(owned, self, time.time()), counted)
            handed = True
            return True
        finally:
            self._finished(mine, current, slots, handed=handed)

    async def _write_start(self, mine: list[Any], counted: bool) -> bool:
        """Write the batch's START markers; once written, its records are kept alive until handed out."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        try:
            await self.client.start(mine, prefetched=not counted)
        except Exception as exc:
            log.warning("queue %r: %s", self.client.queue_id, exc)
            return False
        self._rtt = 0.7 * self._rtt + 0.3 * (loop.time() - began)
        if mine:
            # Started: kept alive from now on, also while it waits for the batches before it.
            self._waiting[id(mine)] = mine
        return True

    async def _commit(self, positions: dict[TopicPartition, int]) -> bool:
        """Commit the read position of the batch (its START and every earlier one are written)."""
        try:
            await self.client.commit(positions)
        except Exception as exc:
            log.warning("queue %r: %s", self.client.queue_id, exc)
            return False
        return True

    @staticmethod
    async def _handed_out(previous: _InFlight | None) -> bool:
        """Wait for the batch before; whether it was handed out (else this one is dropped too)."""
        if previous is None:
            return True
        await asyncio.wait([previous.task])
        task = previous.task
        return not task.cancelled() and task.exception() is None and task.result()

    def _still_owned(self, mine: list[Any], positions: dict[TopicPartition, int]) -> list[Any]:
        """The batch's records whose partitions are still assigned to this member.

        Revoked before the commit (which was skipped for it): the new owner reads those records
        again and its START takes them over; handing them out here too would process them twice.
        """
        consumer = self.client.consumer
        owned = consumer.assignment() if consumer is not None else frozenset()
        if not mine or owned.issuperset(positions):
            return mine
        source = self.client.source
        assert source is not None
        topic = self.config.message_topic
        keep = {tp.partition for tp in positions if tp in owned and tp.topic == topic}
        log.debug("queue %r: records of revoked partitions dropped", self.client.queue_id)
        return [r for r in mine if source.ident(r).partition in keep]

    def _finished(
        self, mine: list[Any], current: _InFlight, slots: asyncio.Semaphore, *, handed: bool
    ) -> None:
        """The batch left the pipeline (handed out, or dropped): release its slot."""
        if not handed:
            # Dropped (this batch, or one before it): the loop settles what is in flight, then
            # rewinds to the committed offsets and reads the dropped records again.
            self.client.needs_reset = True
        if not current.started.done():
            current.started.set_result(False)
        self._waiting.pop(id(mine), None)
        slots.release()

    async def _settle_pipeline(self) -> None:
        """Wait until every batch in flight was committed and handed out, or dropped."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is not None:
            await asyncio.wait([pipeline.task])

    async def _hand_out(self, messages: list[Message], counted: bool = True) -> None:
        count = len(messages)
        self.metrics.count("received", count)
        self._in_flight += count
        self.metrics.set_in_flight(self._in_flight)
        if self.keepalive_received:
            self._prune()
            self._handed.append(messages)
        buffer, capacity = self._buffer, self._capacity
        start = 0
        while start < count:
            room = capacity - len(buffer)
            if room <= 0 and not self._closed:
                self._space.clear()
                await self._space.wait()
                continue
            end = count if self._closed else min(count, start + room)
            if self._marking and counted:
                # STARTed as delivered: nothing to mark. Those before it are marked first (the
                # marked messages stay a prefix of the buffer).
                self._mark_ahead(len(buffer))
                self._marks.append([end - start, self._written_already])
                self._marked_ahead += end - start
            buffer.extend(messages[start:end] if start or end < count else messages)
            start = end
            if self._marking:
                self._mark_ahead(0)
            self._ready.set()

    # -- hand-out marks ---------------------------------------------------------------------
    def _mark_ahead(self, take: int) -> asyncio.Future[Any] | None:
        """Mark the first ``take`` buffered messages (and a window after them) handed out.

        Returns a mark write they still wait for, or None once every one of them is written.
        """
        buffer = self._buffer
        take = min(take, len(buffer))
        ahead = self._marked_ahead
        end = min(len(buffer), take + self._lead)
        # Marked in chunks as messages arrive, so a mark is mostly written before receiving gets there.
        if ahead < take or end - ahead >= max(1, self._lead // 4):
            source = self.client.source
            assert source is not None
            raws = [m.raw for m in itertools.islice(buffer, ahead, end)]
            write: asyncio.Future[Any]
            try:
                write = asyncio.ensure_future(self.client.handout_ranges(source.ranges(raws)))
            except Exception as exc:  # the log closed: hand them out unmarked (logged, counted)
                write = asyncio.get_running_loop().create_future()
                write.set_exception(exc)
            self._writes.add(write)
            write.add_done_callback(self._written)
            self._marks.append([end - ahead, write])
            self._marked_ahead = end
        covered = 0
        for count, pending in self._marks:
            if covered >= take:
                break
            if not pending.done():
                return pending  # type: ignore[no-any-return]
            covered += count
        return None

    def _counted_at_start(self, now: float) -> bool:
        """Whether the next batch's START counts as its delivery (no hand-out marks for it).

        Marks pay off while they can be written ahead of receiving: the lead they need is about
        four marker round trips of messages at the rate the application takes them (measured
        leaving out the time it waited for marks, so waiting cannot make it look slow). Where that
        is more than ``handout_window`` (an application taking messages faster than marks can be
        written ahead of it), a batch is counted at START, as without marks.
        """
        if not self._marking:
            return True
        return self._adapt_lead(now) > self._window

    def _adapt_lead(self, now: float) -> float:
        """Sample the application's pace and set the lead from it; returns the lead it needs.

        Called for each batch before its START, and whenever receiving had to wait for a mark: a
        batch's lead is first chosen before anything is known of the reader's pace, and a reader
        waiting for every mark would otherwise take ``_MIN_LEAD`` messages per marker round trip
        until the next batch.
        """
        elapsed = now - self._sampled_at
        if elapsed >= 0.01:
            busy = max(elapsed - (self._mark_wait - self._sampled_wait), 0.001)
            rate = (self._taken - self._sampled_taken) / busy
            self._rate = rate if self._sampled_at == 0.0 else 0.7 * self._rate + 0.3 * rate
            self._sampled_at, self._sampled_taken, self._sampled_wait = now, self._taken, self._mark_wait
        need = 4 * self._rate * self._rtt
        self._lead = min(self._window, max(_MIN_LEAD, int(need) + 1))
        return need

    def _marked_ready(self, limit: int) -> int:
        """How many of the first ``limit`` buffered messages have their hand-out mark written."""
        ready = 0
        for count, write in self._marks:
            if ready >= limit or not write.done():
                break
            ready += count
        return min(ready, limit)

    def _unmark(self, taken: int) -> None:
        """``taken`` marked messages left the buffer's head."""
        self._marked_ahead -= taken
        marks = self._marks
        while taken:
            head = marks[0]
            if head[0] <= taken:
                taken -= head[0]
                marks.popleft()
            else:
                head[0] -= taken
                taken = 0

    def _prune(self) -> None:
        """Forget handed-out batches whose messages are all settled or interrupted."""
        handed, interrupted = self._handed, self._interrupted
        while handed and all(m.settled or id(m) in interrupted for m in handed[0]):
            for m in handed.popleft():
                interrupted.discard(id(m))
        if len(handed) > _COMPACT_AFTER:
            # One message held for long must not keep every later batch alive behind it.
            live = [m for batch in handed for m in batch if not m.settled and id(m) not in interrupted]
            # No live message is interrupted, and ids of dropped ones must go (ids are reused).
            self._interrupted = set()
            self._handed = deque([live]) if live else deque()

    def _kept_alive(self) -> list[Any]:
        """Records of started messages not settled: waiting to be handed out, buffered, or
        (``keepalive_received``) handed out and not interrupted. One may appear twice."""
        kept = [r for batch in self._waiting.values() for r in batch]
        if not self.keepalive_received:
            return kept + [m.raw for m in self._buffer]
        self._prune()
        interrupted = self._interrupted
        return kept + [
            m.raw for batch in self._handed for m in batch if not m.settled and id(m) not in interrupted
        ]

    async def _keepalive(self) -> None:
        period = self.config.redelivery_timeout / 2
        while not self._closed:
            await asyncio.sleep(period)
            raws = self._kept_alive()
            source = self.client.source
            if raws and source is not None:
                self._track(self.client.keepalive_ranges(source.ranges(raws)))
                self.metrics.count("keepalives", len(raws))

    def _track(self, writes: list[Any]) -> None:
        for write in writes:
            future = asyncio.ensure_future(write)
            self._writes.add(future)
            future.add_done_callback(self._written)

    def _written(self, future: asyncio.Future[Any]) -> None:
        self._writes.discard(future)
        if not future.cancelled() and future.exception() is not None:
            self.metrics.count("marker_errors")
            log.warning("writing a marker failed (the message may be redelivered): %r", future.exception())

    def _end(self, raws: list[Any]) -> None:
        """END ``raws`` with the other acks of this event-loop pass (one batched marker)."""
        self._ending.extend(raws)
        if not self._end_scheduled:
            self._end_scheduled = True
            asyncio.get_running_loop().call_soon(self._flush_ends)

    def _flush_ends(self) -> None:
        self._end_scheduled = False
        raws, self._ending = self._ending, []
        source = self.client.source
        if raws and source is not None:
            try:
                self._track(self.client.processed_ranges(source.ranges(raws)))
            except Exception as exc:  # the log closed under a late ack: a duplicate, never a loss
                self.metrics.count("marker_errors")
                log.warning("writing END markers failed (the messages may be redelivered): %r", exc)

    def _settled(self, count: int) -> None:
        self._in_flight -= count
        self.metrics.set_in_flight(self._in_flight)

    async def flush(self) -> None:
        """Wait until every marker written so far reached the log."""
        self._flush_ends()
        if self._writes:
            await asyncio.gather(*list(self._writes), return_exceptions=True)

    async def close(self) -> None:
        """Stop polling; buffered messages never handed out are released for redelivery at once.

        Messages handed out and not settled stop being kept alive: they are redelivered after the
        timeout unless settled before. Pending marker writes are flushed. Idempotent.
        """
        if self._closed:
            return
        self._closed = True
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.config.close_timeout  # one bound for the waits below
        self._space.set()  # a finisher waiting for room puts its batch and ends
        await _stop(self._keepalive_task)
        await _stop(self._loop_task)
        # Never cut a batch between its START markers and its commit (else it is both redelivered
        # and read again); a commit that hangs does not hang close().
        pipeline = self._pipeline
        if pipeline is not None:
            done, _ = await asyncio.wait([pipeline.task], timeout=max(0.0, deadline - loop.time()))
            if not done:
                pipeline.task.cancel()
        unreceived = list(self._buffer)
        self._buffer.clear()
        self._marks.clear()
        self._marked_ahead = 0
        self._ready.set()  # wake every receive() waiting on the empty buffer
        source = self.client.source
        if unreceived and source is not None:
            self._settled(len(unreceived))
            ranges = source.ranges([m.raw for m in unreceived])
            if self._marking:  # also those marked ahead: no application saw them
                self._track([self.client.handout_ranges(ranges, returned=True, redeliver_after=0)])
            else:
                self._track(self.client.keepalive_ranges(ranges, redeliver_after=0))
        self._flush_ends()
        writes = list(self._writes)
        left: set[Any] = set()
        if writes:
            _, left = await asyncio.wait(writes, timeout=max(0.0, deadline - loop.time()))
        if left:
            log.warning(
                "queue %s: %d marker write(s) had not reached the log %gs into close (broker "
                "unreachable?); their messages are redelivered after the redelivery timeout",
                self.client.queue_id,
                len(left),
                self.config.close_timeout,
            )
        await self.client.close()

    # -- receiving ------------------------------------------------------------------------
    async def receive(self, timeout: float | None = None) -> Message:
        """The next message (``Timeout`` after ``timeout`` seconds; ``ClosedError`` once closed)."""
        if self._closed:
            raise ClosedError("the queue consumer is closed")
        self.start()
        buffer = self._buffer
        if not buffer or (self._marking and self._mark_ahead(1) is not None):
            try:
                async with asyncio.timeout(timeout):
                    while True:
                        if self._closed:
                            raise ClosedError("the queue consumer is closed")
                        if not buffer:
                            if self._refused is not None:
                                raise self._refused.with_traceback(None)
                            self._ready.clear()
                            await self._ready.wait()
                            continue
                        pending = self._mark_ahead(1) if self._marking else None
                        if pending is None:
                            break
                        began = time.monotonic()
                        await asyncio.wait([pending])  # never cancels the shared write
                        self._mark_wait += time.monotonic() - began
                        self._adapt_lead(asyncio.get_running_loop().time())
            except TimeoutError:
                if self._closed:
                    raise ClosedError("the queue consumer is closed") from None
                raise Timeout(f"no message on queue {self.client.queue_id!r} within {timeout}s") from None
        message = buffer.popleft()
        self._taken += 1
        if self._marking:
            self._unmark(1)
        self._space.set()
        if not self.keepalive_received:  # kept alive until handed out: the deadline runs from here
            start_ack_deadline((message,), self.config.redelivery_timeout)
        return message

    def receive_ready(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages already buffered (and marked handed out), without waiting."""
        buffer = self._buffer
        if not buffer or limit <= 0:
            return []
        if self._marking:
            self._mark_ahead(limit)
            limit = self._marked_ready(limit)
            if not limit:
                return []
            self._unmark(limit)
        self._taken += limit
        if limit >= len(buffer):
            out = list(buffer)
            buffer.clear()
        else:
            out = [buffer.popleft() for _ in range(limit)]
        self._space.set()
        if not self.keepalive_received:
            start_ack_deadline(out, self.config.redelivery_timeout)
        return out

    def interrupt(self, message: Message) -> None:
        """Stop keeping ``message`` alive without settling it (kafka-mq-go's ``Interrupt``).

        The tracker redelivers it once the redelivery timeout passes.
        """
        if own_acker(message) is not self or message.settled or id(message) in self._interrupted:
            return
        if self.keepalive_received:
            self._interrupted.add(id(message))
        self._settled(1)

    # -- the Acker protocol ---------------------------------------------------------------
    def _source(self) -> QueueSource:
        source = self.client.source
        if source is None:  # pragma: no cover - a message exists only after a poll
            raise AckError("the queue consumer has not read anything")
        return source

    async def ack(self, message: Message) -> None:
        """Write END (merged with the other acks of this event-loop pass): the message is done."""
        self._settled(1)
        self._end([message.raw])
        self.metrics.count("acked")

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Write END for this consumer's pending messages among ``messages``; returns the others."""
        others: list[Message] = []
        raws: list[Any] = []
        for message in messages:
            if message.acker is self:
                if claim_ack(message):
                    raws.append(message.raw)
            else:
                others.append(message)
        if raws:
            self._end(raws)
            self.metrics.count("acked", len(raws))
            self._settled(len(raws))
        return others

    async def nack(self, message: Message, delay: float | None) -> None:
        """Ask the tracker to redeliver the message after ``delay`` seconds (at once without)."""
        self._settled(1)
        ranges = self._source().ranges([message.raw])
        self._track(self.client.keepalive_ranges(ranges, redeliver_after=delay or 0.0))
        self.metrics.count("nacked")

    async def in_progress(self, message: Message) -> None:
        """Write KEEPALIVE: the message gets another full redelivery timeout."""
        if self._closed or id(message) in self._interrupted:
            raise AckError(f"message {message.id} is not held by this consumer (closed, or interrupted)")
        writes = self.client.keepalive_ranges(self._source().ranges([message.raw]))
        await self._await_writes(writes, f"the keep-alive of message {message.id}")

    async def _await_writes(self, writes: Sequence[Any], what: str) -> None:
        """Wait for ``writes`` to reach the log; ``Timeout`` after the operation timeout."""
        if not writes:
            return
        futures = [asyncio.ensure_future(write) for write in writes]
        # wait(), not a timeout around gather(): a write given up on here stays tracked and is
        # neither cancelled nor lost (close() still counts it).
        _, pending = await asyncio.wait(futures, timeout=self.config.operation_timeout)
        if pending:
            for future in pending:
                future.add_done_callback(_retrieve)
            raise Timeout(f"{what} did not reach the log within {self.config.operation_timeout:g}s")
        for future in futures:
            future.result()

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Publish to the dead-letter topic (if configured), then write END."""
        target = self.config.dead_letter_topic
        if target is not None:
            headers = dict(message.attributes)
            headers["dead_letter_reason"] = reason or "dead-lettered by the consumer"
            headers["delivery_attempts"] = str(message.delivery_attempt or 1)
            send = self._sender.send(target, message.data, key=message.key, headers=headers)
            await self._await_writes([send], f"dead-lettering message {message.id} to {target!r}")
        else:
            log.warning("dropping dead-lettered message %s: no dead_letter_topic is configured", message.id)
        self._settled(1)
        self._end([message.raw])
        self.metrics.count("dead_lettered")
