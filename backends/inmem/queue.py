"""Message-queue semantics over an in-memory topic.

A subscription is a cursor over the topic's partitions plus delivery state: messages in
flight with their ack deadlines, messages to redeliver (nacked or expired), delayed nacks,
and delivery attempts. Consumers of one subscription compete for its messages.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import logging
from collections import deque
from collections.abc import Sequence
from typing import Self

from broker import Message, OutboundMessage
from broker.backends.inmem.settings import ConsumerOptions
from broker.backends.inmem.slices import partition_slice
from broker.backends.inmem.store import InmemBroker, TopicState, wait_for_change, wake
from broker.driver.acking import claim_acks, start_ack_deadline
from broker.driver.clock import clock
from broker.driver.partitioning import Partitioner
from broker.driver.pulled import PulledBatchedMessageIteration
from broker.driver.resources import AsyncResource
from broker.errors import AckError, ClosedError, ConfigError, Timeout

__all__ = ["InmemBatchedMessageIterator", "InmemMessageIterator", "Subscription"]

log = logging.getLogger("broker.backends.inmem")


class Lease:
    """The messages handed out together by one ``take()``, sharing one ack deadline.

    ``Message.raw`` is the lease currently holding the message; ``in_progress()`` moves a message
    to a new lease of its own, and an expired lease only redelivers the messages it still holds.
    """

    __slots__ = ("deadline", "expired", "messages", "pending")

    def __init__(self, deadline: float, messages: list[Message]) -> None:
        self.deadline = deadline
        self.messages = messages
        self.pending = len(messages)
        self.expired = False

    def settle(self, count: int) -> None:
        """``count`` of its messages were settled; once none is pending, let go of the messages.

        Each message refers to its lease (``raw``): dropping the lease's list breaks that cycle, so
        settled messages are freed at once instead of by the cyclic garbage collector.
        """
        pending = self.pending = self.pending - count
        if pending <= 0:
            self.messages = []


class Subscription:
    """Delivery state of one subscription; also the :class:`~broker.message.Acker` of its messages."""

    def __init__(
        self,
        broker: InmemBroker,
        topic: TopicState,
        name: str,
        options: ConsumerOptions,
        partitioner: Partitioner,
    ) -> None:
        self.broker = broker
        self.topic = topic
        self.name = name
        self.options = options
        self.ack_deadline = options.ack_deadline
        self._partitioner = partitioner
        if options.start == "latest":
            self.cursors = [p.high for p in topic.partitions]
        else:
            self.cursors = [p.base for p in topic.partitions]
        self.ready: deque[Message] = deque()
        self.delayed: list[tuple[float, int, Message]] = []
        self.leases: deque[Lease] = deque()
        self._seq = itertools.count()
        self._rotation = 0
        self._redelivery_turn = False

    @property
    def in_flight(self) -> int:
        """Messages delivered and not yet settled or expired."""
        return sum(lease.pending for lease in self.leases if not lease.expired)

    # -- delivery -------------------------------------------------------------------------
    def _expire(self, now: float) -> None:
        leases = self.leases
        while leases:
            lease = leases[0]
            if lease.pending > 0 and lease.deadline > now:
                break
            leases.popleft()
            if lease.pending > 0:
                lease.expired = True
                for message in lease.messages:
                    if message.raw is lease and not message.settled:
                        self._requeue(message, "ack deadline passed")
        delayed = self.delayed
        while delayed and delayed[0][0] <= now:
            self.ready.append(heapq.heappop(delayed)[2])

    def expire(self) -> None:
        """Queue for redelivery what passed its ack deadline, as a broker does on its own clock
        (a take does it too; :func:`~broker.backends.inmem.backlog.backlog` before counting)."""
        if self.leases or self.delayed:
            self._expire(clock.monotonic())

    def next_due(self) -> float | None:
        """The monotonic time of the next deadline or delayed redelivery (None: nothing pending)."""
        due = None
        for lease in self.leases:
            if lease.pending > 0:
                due = lease.deadline
                break
        if self.delayed and (due is None or self.delayed[0][0] < due):
            due = self.delayed[0][0]
        return due

    def take(self, limit: int) -> list[Message]:
        """Up to ``limit`` messages ready now; redeliveries and new messages share the batch fairly."""
        now = clock.monotonic()
        if self.leases or self.delayed:
            self._expire(now)
        wall = clock.time()
        ready = self.ready
        if limit == 1 and not ready and len(self.cursors) == 1:
            # The one-at-a-time path, kept lean: no slices, no rotation.
            part = self.topic.partitions[0]
            cursor = self.cursors[0]
            index = cursor - part.base
            if index < 0:
                index, cursor = 0, part.base
            if index >= len(part.values):
                return []
            self.cursors[0] = cursor + 1
            single: list[Message] = []
            lease = Lease(now + self.ack_deadline, single)
            message = Message(
                "0:" + str(cursor),
                part.values[index],  # type: ignore[arg-type]
                part.keys[index],
                part.attributes[index],
                part.times[index],
                wall,
                1,
                lease,
                self,
            )
            message._ack_deadline = self.ack_deadline
            message._due = lease.deadline
            single.append(message)
            lease.pending = 1
            self.leases.append(lease)
            return [message]
        out: list[Message] = []
        lease = Lease(now + self.ack_deadline, out)
        share = limit
        if ready and self._has_new():
            # Redeliveries and new messages take turns, so messages that keep failing never
            # starve the ones not yet delivered: half of a batch, or every other single take.
            if limit > 1:
                share = (limit + 1) // 2
            else:
                self._redelivery_turn = not self._redelivery_turn
                share = 1 if self._redelivery_turn else 0
        while ready and len(out) < share:
            old = ready.popleft()
            attempt = (old.delivery_attempt or 1) + 1
            out.append(
                Message(
                    old.id, old.data, old.key, old.attributes, old.publish_time, wall, attempt, lease, self
                )
            )
        if len(out) < limit:
            parts = self.topic.partitions
            count = len(parts)
            cursors = self.cursors
            for step in range(count):
                p = (self._rotation + step) % count
                part = parts[p]
                cursor = cursors[p]
                base = part.base
                high = base + len(part.values)
                if cursor >= high:
                    continue
                entries, end = partition_slice(part, cursor, limit - len(out))
                prefix = f"{p}:"
                out.extend(
                    [
                        Message(prefix + str(offset), data, key, attributes, published, wall, 1, lease, self)  # type: ignore[arg-type]
                        for offset, data, key, attributes, published in entries
                    ]
                )
                cursors[p] = end
                if len(out) >= limit:
                    self._rotation = (p + 1) % count
                    break
        if not out:
            return out
        start_ack_deadline(out, self.ack_deadline, now)
        lease.pending = len(out)
        self.leases.append(lease)
        return list(out)

    def _has_new(self) -> bool:
        """Whether any partition holds messages this subscription has not delivered yet."""
        for part, cursor in zip(self.topic.partitions, self.cursors, strict=True):
            if cursor < part.base + len(part.values):
                return True
        return False

    def _requeue(self, message: Message, why: str, delay: float | None = None) -> None:
        """Queue ``message`` for redelivery, or dead-letter it once it used up its attempts."""
        limit = self.options.max_attempts
        if limit is not None and (message.delivery_attempt or 1) >= limit:
            self._dead_letter(message, f"{why} after {limit} deliveries")
        elif delay:
            heapq.heappush(self.delayed, (clock.monotonic() + delay, next(self._seq), message))
        else:
            self.ready.append(message)

    def _dead_letter(self, message: Message, reason: str) -> None:
        target = self.options.dead_letter_topic
        if target is None:
            log.warning(
                "dropping message %s of subscription %r (%s) and no dead_letter_topic is set",
                message.id,
                self.name,
                reason,
            )
            return
        attributes = dict(message.attributes)
        attributes.update(
            {
                "dead_letter_reason": reason,
                "dead_letter_source": f"{self.topic.name}/{self.name}",
                "delivery_attempts": str(message.delivery_attempt or 1),
            }
        )
        topic = self.broker.topic(target, len(self.topic.partitions))
        self.broker.append(topic, [OutboundMessage(message.data, message.key, attributes)], self._partitioner)

    # -- the Acker protocol ---------------------------------------------------------------
    @staticmethod
    def _release(message: Message) -> bool:
        """Take ``message`` out of its lease; False if the lease expired (it was redelivered)."""
        lease: Lease = message.raw
        if lease.expired:
            return False
        lease.settle(1)
        return True

    def _withdraw(self, message: Message) -> None:
        """A late ack of ``message``, whose lease expired: as a broker that gets an ack before it
        redelivers, take the message out of redelivery where it waits (ready, or delayed). A copy
        handed out again meanwhile is left to its consumer (the ack came too late for it)."""
        ready = self.ready
        for index, waiting in enumerate(ready):
            if waiting is message:
                del ready[index]
                return
        delayed = self.delayed
        for index, entry in enumerate(delayed):
            if entry[2] is message:
                delayed[index] = delayed[-1]
                delayed.pop()
                heapq.heapify(delayed)
                return

    async def ack(self, message: Message) -> None:
        """Settle ``message`` for good; an ack after its lease expired takes it out of redelivery
        unless it was handed out again (``Message.ack`` then says the deadline had passed)."""
        if not self._release(message):
            self._withdraw(message)

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack this subscription's pending messages among ``messages``; returns the others."""
        claimed, others = claim_acks(messages, self)
        lease: Lease | None = None
        count = 0
        for message in claimed:  # a batch shares one lease: settle it once per run of messages
            if message.raw.expired:
                self._withdraw(message)
                continue
            if message.raw is not lease:
                if lease is not None and not lease.expired:
                    lease.settle(count)
                lease, count = message.raw, 0
            count += 1
        if lease is not None and not lease.expired:
            lease.settle(count)
        return others

    async def nack(self, message: Message, delay: float | None) -> None:
        """Redeliver ``message``, after ``delay`` seconds if given."""
        if not self._release(message):
            return
        self._requeue(message, "nacked", delay)
        if self.topic.waiters:
            wake(self.topic.waiters)

    async def in_progress(self, message: Message) -> None:
        """Push ``message``'s deadline ``ack_deadline`` seconds from now."""
        lease: Lease = message.raw
        if lease.expired:
            raise AckError(f"message {message.id} is no longer in flight: its ack deadline passed")
        lease.settle(1)
        renewed = Lease(clock.monotonic() + self.ack_deadline, [message])
        message.raw = renewed
        self.leases.append(renewed)

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Stop redelivering ``message``; publish it to the dead-letter topic if one is set."""
        if self._release(message):
            self._dead_letter(message, reason or "dead-lettered by the consumer")


class _Consumer(AsyncResource):
    """What the single and batched iterators share: waiting, closing."""

    def __init__(self, subscription: Subscription) -> None:
        self._subscription = subscription
        self._broker = subscription.broker
        self._closed = False

    async def _take(self, limit: int, timeout: float | None) -> list[Message]:
        subscription = self._subscription
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        while True:
            if self._closed:
                raise ClosedError("the in-memory consumer is closed")
            faults = self._broker.faults
            if faults is not None:
                faults.before_receive(subscription.topic.name, subscription.name)
            messages = subscription.take(limit)
            if messages:
                if faults is not None and (delay := faults.receive_delay(subscription.name)):
                    await asyncio.sleep(delay)
                return messages
            wait = None if deadline is None else deadline - loop.time()
            if wait is not None and wait <= 0:
                raise Timeout(
                    f"no message on {subscription.topic.name}/{subscription.name} within {timeout}s"
                )
            due = subscription.next_due()
            if due is not None:
                # 1 ms late on a real clock, so the timer never fires just before ``due``; a
                # virtual clock jumps to the timer exactly.
                until_due = max(0.0, due - clock.monotonic()) + (0.0 if clock.virtual else 0.001)
                wait = until_due if wait is None else min(wait, until_due)
            await wait_for_change([subscription.topic.waiters], wait)

    async def close(self) -> None:
        """Stop consuming; messages in flight stay in flight until acked or their deadline passes."""
        if not self._closed:
            self._closed = True
            wake(self._subscription.topic.waiters)


class InmemMessageIterator(_Consumer):
    """A MessageIterator on an in-memory subscription."""

    async def next_message(self, timeout: float | None = None) -> Message:
        """The next message (``Timeout`` if none within ``timeout`` seconds)."""
        if not self._closed and self._broker.faults is None:  # fast path: a message is ready
            ready = self._subscription.take(1)
            if ready:
                return ready[0]
        return (await self._take(1, timeout))[0]

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Message:
        """The next message; the iteration ends when the iterator is closed."""
        if self._closed:
            raise StopAsyncIteration
        if self._broker.faults is None:
            ready = self._subscription.take(1)
            if ready:
                return ready[0]
        try:
            return (await self._take(1, None))[0]
        except ClosedError:
            raise StopAsyncIteration from None


class InmemBatchedMessageIterator(_Consumer, PulledBatchedMessageIteration):
    """A BatchedMessageIterator: returns what is ready at once, up to ``batch_size``."""

    def __init__(self, subscription: Subscription, batch_size: int, batch_timeout: float) -> None:
        super().__init__(subscription)
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
