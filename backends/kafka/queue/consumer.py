"""The queue Consumer: a background loop filling a bounded buffer, keep-alives, and settlement.

The loop asks the MqClient for batches and puts their messages into a buffer of
``receive_buffer_capacity`` (a full buffer stops the polling: back-pressure). One keep-alive task
writes KEEPALIVE markers each ``redelivery_timeout / 2`` — batched, never a timer per message — for
every message the consumer holds: with ``keepalive_received=True`` (kafka-mq-go's behaviour) from
START until the message is settled; with ``False`` (the portable ``messages()``) only while it
waits in the buffer, so a received message that is neither settled nor kept alive with
``in_progress()`` is redelivered after the timeout, as on every other broker.

Settlement: ``ack`` writes END; ``nack(delay)`` writes a KEEPALIVE whose timeout is the delay, so
the tracker redelivers it then (kafka-mq-go's Nack was an Ack); ``in_progress`` writes a
KEEPALIVE; ``dead_letter`` publishes to the dead-letter topic and writes END. Marker writes are
pipelined: ``ack()`` returns once the END is queued; ``flush()`` and ``close()`` wait for them all.
A lost END costs a duplicate, never a loss.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from typing import Any

from backends.kafka.queue.client import MqClient
from backends.kafka.queue.config import HEADER_ATTEMPT, HEADER_KEY, HEADER_ORIGINAL_ID, HEADER_REDELIVERY_FOR
from backends.kafka.queue.markers import MessageId
from backends.kafka.queue.metrics import QueueMetrics
from backends.kafka.queue.producer import MessageSender
from broker.errors import AckError, ClosedError, Timeout
from broker.message import Message, Record, claim_ack
from broker.resources import AsyncResource

__all__ = ["Consumer"]

log = logging.getLogger("backends.kafka.queue")

_CLOSED = object()  # put into the buffer by close() to wake receivers
_HIDDEN = frozenset({HEADER_ATTEMPT, HEADER_ORIGINAL_ID, HEADER_REDELIVERY_FOR, HEADER_KEY})


async def _stop(task: asyncio.Task[None] | None) -> None:
    if task is not None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task


class Consumer(AsyncResource):
    """Receives the messages of one logical queue; also their :class:`~broker.message.Acker`."""

    def __init__(
        self, client: MqClient, metrics: QueueMetrics | None = None, *, keepalive_received: bool = True
    ) -> None:
        self.client = client
        self.keepalive_received = keepalive_received
        self._received: set[MessageId] = set()
        self.config = client.config
        self.metrics = metrics or QueueMetrics()
        self._buffer: asyncio.Queue[Any] = asyncio.Queue(maxsize=self.config.receive_buffer_capacity)
        self._held: dict[MessageId, Message] = {}
        self._writes: set[asyncio.Future[Any]] = set()
        self._sender = MessageSender(client._log)
        self._loop_task: asyncio.Task[None] | None = None
        self._keepalive_task: asyncio.Task[None] | None = None
        self._closed = False
        self._waiting = 0

    # -- lifecycle ------------------------------------------------------------------------
    def start(self) -> None:
        """Start the polling loop and keep-alives (done by the first ``receive``)."""
        if self._closed:
            raise ClosedError("the queue consumer is closed")
        if self._loop_task is None:
            loop = asyncio.get_running_loop()
            self._loop_task = loop.create_task(self._run(), name=f"queue-consumer-{self.client.queue_id}")
            self._keepalive_task = loop.create_task(self._keepalive(), name="queue-keepalive")

    async def _run(self) -> None:
        client = self.client
        backoff = 0.05
        while not self._closed:
            try:
                if client.needs_reconnect:
                    await client.reconnect()
                if client.needs_reset:
                    await client.reset()
                records = await client.next_batch(
                    self.config.max_messages_per_poll, self.config.next_message_timeout
                )
                backoff = 0.05
            except asyncio.CancelledError:
                raise
            except ClosedError:
                return
            except Exception as exc:
                log.warning("queue %r: %s; retrying in %.2fs", client.queue_id, exc, backoff)
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, 5.0)
                continue
            if not records:
                continue
            now = time.time()
            self.metrics.count("received", len(records))
            buffer, held = self._buffer, self._held
            for record in records:
                message = self._message(record, now)
                held[message.raw] = message
                if buffer.full():
                    await buffer.put(message)  # back-pressure: wait for receivers
                else:
                    buffer.put_nowait(message)
            self.metrics.set_in_flight(len(self._held))

    def _message(self, record: Record, now: float) -> Message:
        headers = record.attributes
        # In queue mode the record key is the queue id; the application's key rides in a header.
        key = None if self.client.mode == "queue" else record.key
        attempt = 1
        ident = f"{record.partition}:{record.offset}"
        attributes = headers
        if headers and not _HIDDEN.isdisjoint(headers):
            attempt = int(headers.get(HEADER_ATTEMPT, "1") or 1)
            ident = headers.get(HEADER_ORIGINAL_ID, ident)
            key = headers.get(HEADER_KEY, key)
            attributes = {k: v for k, v in headers.items() if k not in _HIDDEN}
        return Message(
            ident,
            record.value or b"",
            key,
            attributes,
            record.publish_time,
            now,
            attempt,
            MessageId(record.partition, record.offset),
            self,
        )

    async def _keepalive(self) -> None:
        period = self.config.redelivery_timeout / 2
        while not self._closed:
            await asyncio.sleep(period)
            ids = (
                list(self._held)
                if self.keepalive_received
                else [m for m in self._held if m not in self._received]
            )
            if ids:
                self._track(self.client.processing_in_progress(ids))
                self.metrics.count("keepalives", len(ids))

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

    async def flush(self) -> None:
        """Wait until every marker written so far reached the log."""
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
        # Never cut a batch between its START markers and its commit (else it is both redelivered
        # and read again); keep-alives stop first, and a commit that hangs does not hang close().
        await _stop(self._keepalive_task)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(self.config.redelivery_timeout):
                await self.client.settled()
        await _stop(self._loop_task)
        unreceived = []
        while not self._buffer.empty():
            item = self._buffer.get_nowait()
            if item is not _CLOSED:
                unreceived.append(item)
        for _ in range(self._waiting):  # wake every receive() blocked on the empty buffer
            self._buffer.put_nowait(_CLOSED)
        for message in unreceived:
            self._held.pop(message.raw, None)
        if unreceived:
            self._track(self.client.processing_in_progress([m.raw for m in unreceived], redeliver_after=0))
        await self.flush()
        await self.client.close()

    # -- receiving ------------------------------------------------------------------------
    async def receive(self, timeout: float | None = None) -> Message:
        """The next message (``Timeout`` after ``timeout`` seconds; ``ClosedError`` once closed)."""
        if self._closed:
            raise ClosedError("the queue consumer is closed")
        self.start()
        self._waiting += 1
        try:
            async with asyncio.timeout(timeout):
                item = await self._buffer.get()
        except TimeoutError:
            if self._closed:
                raise ClosedError("the queue consumer is closed") from None
            raise Timeout(f"no message on queue {self.client.queue_id!r} within {timeout}s") from None
        finally:
            self._waiting -= 1
        if item is _CLOSED:
            raise ClosedError("the queue consumer is closed")
        message: Message = item
        if not self.keepalive_received:
            self._received.add(message.raw)
        return message

    def receive_ready(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages already buffered, without waiting."""
        out: list[Message] = []
        while len(out) < limit and not self._buffer.empty():
            item = self._buffer.get_nowait()
            if item is _CLOSED:
                self._buffer.put_nowait(item)
                break
            out.append(item)
        if not self.keepalive_received:
            self._received.update(m.raw for m in out)
        return out

    # -- the Acker protocol ---------------------------------------------------------------
    def _release(self, message: Message) -> bool:
        self._received.discard(message.raw)
        released = self._held.pop(message.raw, None) is not None
        if released:
            self.metrics.set_in_flight(len(self._held))
        return released

    async def ack(self, message: Message) -> None:
        """Write END: the message is done."""
        self._release(message)
        self._track(self.client.processed([message.raw]))
        self.metrics.count("acked")

    async def ack_many(self, messages: list[Message]) -> list[Message]:
        """Write END for this consumer's pending messages among ``messages``; returns the others."""
        others: list[Message] = []
        ids: list[MessageId] = []
        for message in messages:
            if message.acker is self:
                if claim_ack(message):
                    self._held.pop(message.raw, None)
                    self._received.discard(message.raw)
                    ids.append(message.raw)
            else:
                others.append(message)
        if ids:
            self._track(self.client.processed(ids))
            self.metrics.count("acked", len(ids))
            self.metrics.set_in_flight(len(self._held))
        return others

    async def nack(self, message: Message, delay: float | None) -> None:
        """Ask the tracker to redeliver the message after ``delay`` seconds (at once without)."""
        self._release(message)
        self._track(self.client.processing_in_progress([message.raw], redeliver_after=delay or 0.0))
        self.metrics.count("nacked")

    async def in_progress(self, message: Message) -> None:
        """Write KEEPALIVE: the message gets another full redelivery timeout."""
        if message.raw not in self._held:
            raise AckError(f"message {message.id} is not held by this consumer (settled, or closed)")
        await asyncio.gather(*self.client.processing_in_progress([message.raw]))

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Publish to the dead-letter topic (if configured), then write END."""
        target = self.config.dead_letter_topic
        if target is not None:
            headers = dict(message.attributes)
            headers["dead_letter_reason"] = reason or "dead-lettered by the consumer"
            headers["delivery_attempts"] = str(message.delivery_attempt or 1)
            await self._sender.send(target, message.data, key=message.key, headers=headers)
        else:
            log.warning("dropping dead-lettered message %s: no dead_letter_topic is configured", message.id)
        self._release(message)
        self._track(self.client.processed([message.raw]))
        self.metrics.count("dead_lettered")
