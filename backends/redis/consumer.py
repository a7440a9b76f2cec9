"""Consuming a stream through a consumer group: the pull driver and its acker.

Each consumer (one ``messages()`` iterator) is a consumer of its own in the subscription's group,
named ``<host>-<pid>-<random>``. One read at a time runs in the background:

1. ``XAUTOCLAIM`` takes over entries of the group that stayed pending (read, not acked) for
   longer than the ack deadline, whichever consumer had them: the deadline passed, the consumer
   died, or the entry was nacked (a nack sets the entry's idle time past any deadline). A claimed
   entry's ``delivery_attempt`` is the delivery count of the pending entries list (``XPENDING``),
   which the claim raised by one.
2. Otherwise ``XREADGROUP ... >`` reads new entries, waiting up to ``poll_interval`` seconds
   (``BLOCK``), so expired entries are looked for at least that often and ``close()`` never
   waits on a long read. A new entry's ``delivery_attempt`` is 1.

A read outlives a ``next_message()`` that timed out or was cancelled: what it brings waits in the
consumer for the next call, rather than sitting in the group as pending until its deadline.
``close()`` waits for the read in flight (at most ``close_timeout``), makes what it brought and
nobody took claimable at once, and removes the consumer from the group when it holds no pending
entries (a consumer with pending entries stays, so they can still be claimed).

Settling: ``ack()`` is ``XACK`` (a batch's acks are one ``XACK``); ``in_progress()`` is ``XCLAIM
... JUSTID`` to the consumer itself, which resets the entry's idle time; ``nack()`` is the same
claim with ``IDLE`` set a year back, so the next ``XAUTOCLAIM`` of any consumer of the group takes
it; ``nack(delay)`` sets ``IDLE`` to ``ack_deadline - delay``, so it becomes claimable ``delay``
seconds later. A delay longer than the ack deadline is held by the consumer, which keeps the
entry's idle time fresh until ``delay - ack_deadline`` is left, then sets it as above; if the
consumer closes meanwhile, the entry comes back one ack deadline after its last refresh (sooner
than the delay, never lost).
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket
import uuid
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from redis.asyncio import Redis

from broker import Message, OutboundMessage
from broker.backends.redis.errors import translate
from broker.backends.redis.mapping import (
    ATTRIBUTE_PREFIX,
    Entry,
    RedisMessage,
    read_messages,
    to_fields,
    to_message,
)
from broker.backends.redis.settings import ConsumerOptions, RedisSettings
from broker.driver.acking import claim_acks, release_claim, start_ack_deadline
from broker.driver.clock import clock
from broker.driver.pulled import BufferedPull, PulledBatchedMessageIteration, PulledMessageIteration
from broker.errors import (
    AckError,
    ClosedError,
    ConfigError,
    ProvisioningError,
    ReceiveError,
    UnknownTopic,
)
from broker.retry import ATTR_ATTEMPTS, ATTR_MESSAGE_ID, ATTR_REASON, ATTR_SUBSCRIPTION, ATTR_TOPIC

__all__ = [
    "RedisAcker",
    "RedisBatchedMessageIterator",
    "RedisMessageIterator",
    "consumer_name",
    "stream_resource",
]

log = logging.getLogger("broker.backends.redis")

#: The idle time (ms) a nack gives an entry: past any ack deadline, and below the server's clock.
NACK_IDLE_MS = 365 * 24 * 3600 * 1000

#: Removes a consumer from its group only when it holds no pending entries, atomically (deleting a
#: consumer drops its pending entries from the group: they would never be delivered again).
_FORGET_CONSUMER = """
if #redis.call('XPENDING', KEYS[1], ARGV[1], '-', '+', 1, ARGV[2]) == 0 then
  return redis.call('XGROUP', 'DELCONSUMER', KEYS[1], ARGV[1], ARGV[2])
end
return -1
"""


def consumer_name() -> str:
    """A consumer name no other consumer uses: host, process and a random part."""
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:12]}"


def stream_resource(name: str) -> str:
    """How a ``ProvisioningError`` names the stream ``name``."""
    return f"stream {name!r}"


def _nothing() -> None:
    pass


def _ms(seconds: float) -> int:
    return max(0, int(seconds * 1000))


class RedisAcker:
    """The :class:`~broker.message.Acker` of one consumer: ``XACK`` and ``XCLAIM`` on its group.

    ``Message.raw`` is the :class:`~broker.backends.redis.mapping.Entry`.
    """

    def __init__(
        self,
        client: Redis,
        stream: str,
        group: str,
        name: str,
        options: ConsumerOptions,
        ack_client: Redis | None = None,
        command_timeout: float = 10.0,
    ) -> None:
        self._client = client
        #: The client of ``XACK``: one without a socket timeout (redis-py would run each of its
        #: sends as a task of its own and time each reply), bounded by ``command_timeout`` here.
        self._ack_client = client if ack_client is None else ack_client
        self._command_timeout = command_timeout
        self.stream = stream
        self.group = group
        self.name = name
        self.ack_deadline = options.ack_deadline
        self.max_attempts = options.max_attempts
        self.dead_letter_topic = options.dead_letter_topic
        self._holds: set[asyncio.Task[None]] = set()
        self._acks: list[tuple[str | bytes, asyncio.Future[None]]] = []
        self._acking: asyncio.Task[None] | None = None
        self._sending = False
        #: Called when a nack made an entry claimable at once (the consumer then looks at once).
        self.released: Callable[[], None] = _nothing

    def __repr__(self) -> str:
        return f"<RedisAcker {self.stream!r} group={self.group!r} consumer={self.name!r}>"

    async def ack(self, message: Message) -> None:
        """``XACK`` the entry; acks made while an ``XACK`` is in flight share the next one.

        Each caller waits for the ``XACK`` that carries its entry and gets its own ``AckError``
        when that command fails.
        """
        entry_id = _entry_id(message)
        if self._sending:  # an XACK is in flight: queue behind it
            done = asyncio.get_running_loop().create_future()
            self._acks.append((entry_id, done))
            await done
            return
        self._sending = True  # nothing in flight: send this one at once, from here
        try:
            await self._ack([entry_id], "acking")
        finally:
            self._sending = False
            if self._acks:
                self._acking = asyncio.ensure_future(self._send_acks())

    async def _send_acks(self) -> None:
        """Send the queued acks, one ``XACK`` at a time, each carrying all that queued meanwhile."""
        batch: list[tuple[str | bytes, asyncio.Future[None]]] = []
        self._sending = True
        try:
            while self._acks:
                batch, self._acks = self._acks, []
                try:
                    await self._ack([entry_id for entry_id, _ in batch], "acking")
                except AckError as exc:
                    for _, done in batch:
                        if not done.done():
                            error = AckError(str(exc))
                            error.__cause__ = exc.__cause__
                            done.set_exception(error)
                else:
                    for _, done in batch:
                        if not done.done():
                            done.set_result(None)
        except BaseException as exc:  # cancelled (the loop is closing): nobody waits in vain
            for _, done in batch + self._acks:
                if not done.done():
                    done.set_exception(AckError(f"{self!r}: the ack may not have been sent ({exc!r})"))
            self._acks = []
            raise
        finally:
            self._acking = None
            self._sending = False

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack the pending messages of this consumer with one ``XACK``; return the others in order.

        The ids of messages ``XREADGROUP`` brought go as the server sent them (no id string is
        made for the ack)."""
        claimed, others = claim_acks(messages, self)
        if claimed:
            fresh = RedisMessage
            try:
                ids = [m._entry_id if m.__class__ is fresh else m.id for m in claimed]
                await self._ack(ids, f"acking {len(claimed)} entries")
            except BaseException:
                for message in claimed:
                    release_claim(message)
                raise
        return others

    def _where(self, doing: str) -> str:
        return f"{doing} in group {self.group!r} of stream {self.stream!r}"

    async def _ack(self, ids: Sequence[str | bytes], doing: str) -> None:
        try:
            async with asyncio.timeout(self._command_timeout):
                await self._ack_client.xack(self.stream, self.group, *ids)
        except Exception as exc:
            raise translate(exc, self._where(doing), AckError) from exc

    async def _claim(self, ids: Sequence[str], idle_ms: int | None, doing: str) -> None:
        try:
            await self._client.xclaim(
                self.stream, self.group, self.name, 0, list(ids), idle=idle_ms, justid=True
            )
        except Exception as exc:
            raise translate(exc, self._where(doing), AckError) from exc

    async def nack(self, message: Message, delay: float | None) -> None:
        """Make the entry claimable at once, or after ``delay`` seconds (see the module); dead-letter
        it instead when this was its last allowed delivery (``max_attempts``)."""
        attempt = message.delivery_attempt or 1
        if self.max_attempts is not None and attempt >= self.max_attempts:
            reason = f"nacked on delivery {attempt} (max_attempts={self.max_attempts})"
            await self.move_out([(message.id, _fields(message), attempt)], reason)
        elif not delay:
            await self._claim([message.id], NACK_IDLE_MS, "nacking")
            self.released()
        elif delay <= self.ack_deadline:
            await self._claim([message.id], _ms(self.ack_deadline - delay), "nacking")
        else:
            await self._claim([message.id], 0, "nacking")
            task = asyncio.ensure_future(self._hold(message.id, clock.monotonic() + delay))
            self._holds.add(task)
            task.add_done_callback(self._holds.discard)

    async def _hold(self, entry_id: str, until: float) -> None:
        """Keep ``entry_id`` from being claimed until one ack deadline before ``until``, then let
        its idle time run out at ``until``."""
        deadline = self.ack_deadline
        while True:
            left = until - clock.monotonic()
            try:
                if left <= deadline:
                    await self._claim([entry_id], _ms(deadline - max(left, 0.0)), "releasing a delayed nack")
                    return
                await asyncio.sleep(min(deadline / 2, left - deadline))
                if until - clock.monotonic() > deadline:
                    await self._claim([entry_id], 0, "holding a delayed nack")
            except AckError as exc:
                log.warning("%r: %s; the entry comes back after its ack deadline", self, exc)
                return

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Copy the entry to the dead-letter topic (when there is one) and ``XACK`` it, atomically."""
        attempt = message.delivery_attempt or 1
        await self.move_out(
            [(message.id, _fields(message), attempt)], reason or "dead-lettered by the consumer"
        )

    async def move_out(self, entries: Sequence[tuple[str, Mapping[bytes, bytes], int]], reason: str) -> None:
        """Take ``entries`` (id, fields, deliveries) out of the group: ``XADD`` a copy of each to the
        dead-letter topic with the reason as attributes, and ``XACK`` them, in one ``MULTI``; without a
        dead-letter topic they are acked and dropped (with a warning)."""
        ids = [entry_id for entry_id, _, _ in entries]
        pipeline = self._client.pipeline(transaction=True)
        topic = self.dead_letter_topic
        if topic is not None:
            for entry_id, fields, attempts in entries:
                letter = dict(fields)
                for name, value in (
                    (ATTR_REASON, reason),
                    (ATTR_TOPIC, self.stream),
                    (ATTR_SUBSCRIPTION, self.group),
                    (ATTR_ATTEMPTS, str(attempts)),
                    (ATTR_MESSAGE_ID, entry_id),
                ):
                    letter[ATTRIBUTE_PREFIX + name.encode()] = value.encode()
                pipeline.xadd(topic, letter)  # type: ignore[arg-type]
        else:
            log.warning("%r: dropping %d entries (%s): no dead_letter_topic", self, len(entries), reason)
        pipeline.xack(self.stream, self.group, *ids)
        try:
            await pipeline.execute()
        except Exception as exc:
            raise translate(exc, self._where(f"dead-lettering {len(ids)} entries"), AckError) from exc

    async def in_progress(self, message: Message) -> None:
        """Reset the entry's idle time (``XCLAIM ... JUSTID`` to this consumer)."""
        await self._claim([message.id], None, "extending the deadline")

    async def close(self) -> None:
        """Stop holding delayed nacks (those entries come back after their ack deadline)."""
        holds = list(self._holds)
        for task in holds:
            task.cancel()
        await asyncio.gather(*holds, return_exceptions=True)


class RedisMessages(BufferedPull):
    """The pull driver shared by both iterators: one background read at a time, a buffer."""

    def __init__(
        self,
        client: Redis,
        settings: RedisSettings,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
        ack_client: Redis | None = None,
    ) -> None:
        self._client = client
        self._settings = settings
        self.topic = topic
        self.subscription = subscription
        self.options = options
        self.name = consumer_name()
        self._topic_b, self._group_b, self._name_b = topic.encode(), subscription.encode(), self.name.encode()
        self.acker = RedisAcker(
            client, topic, subscription, self.name, options, ack_client, settings.command_timeout
        )
        self._init_pull()
        self._grouped = False
        self._group_lock = asyncio.Lock()
        self._cursor = "0-0"
        self._next_claim = 0.0
        self.acker.released = self._claim_soon
        #: Pending entries this consumer found deleted from the stream before they were acked.
        self.lost = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic!r} group={self.subscription!r} consumer={self.name!r}>"

    async def __aenter__(self) -> Any:
        await self._ensure_group()
        return self

    async def _ensure_group(self) -> None:
        """Create the subscription's consumer group (and the stream) unless it exists."""
        if self._grouped:
            return
        async with self._group_lock:
            if self._grouped:
                return
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            if self._settings.provision != "create":
                if self._settings.provision == "verify":
                    await self._verify_group()
                self._grouped = True
                return
            start = "$" if self.options.start == "new" else "0"
            try:
                await self._client.xgroup_create(self.topic, self.subscription, id=start, mkstream=True)
            except Exception as exc:
                if "BUSYGROUP" not in str(exc):
                    raise translate(
                        exc, f"creating group {self.subscription!r} of stream {self.topic!r}", ReceiveError
                    ) from exc
            self._grouped = True

    async def _verify_group(self) -> None:
        """Under ``provision="verify"``: ``ProvisioningError`` naming every missing one of the
        stream, the consumer group and the dead-letter stream (nothing is created)."""
        doing = f"verifying group {self.subscription!r} of stream {self.topic!r}"
        missing = []
        try:
            groups = await self._client.xinfo_groups(self.topic)
        except Exception as exc:
            if "no such key" not in str(exc).lower():
                raise translate(exc, doing, ReceiveError) from exc
            missing.append(stream_resource(self.topic))
            groups = []
        if not any(_text(group.get("name")) == self.subscription for group in groups):
            missing.append(f"consumer group {self.subscription!r} of stream {self.topic!r}")
        letters = self.options.dead_letter_topic
        if letters is not None and letters != self.topic:
            try:
                exists = await self._client.exists(letters)
            except Exception as exc:
                raise translate(exc, doing, ReceiveError) from exc
            if not exists:
                missing.append(stream_resource(letters))
        if missing:
            raise ProvisioningError("redis", missing)

    def _no_group(self, exc: Exception) -> list[Message]:
        """The group (or stream) is gone: under ``create`` it is made again on the next read;
        otherwise ``ProvisioningError`` (``verify``) or ``UnknownTopic`` (``none``)."""
        if self._settings.provision == "create":
            self._grouped = False  # the stream was deleted: start over with a new group
            return []
        if self._settings.provision == "verify":
            missing = [f"consumer group {self.subscription!r} of stream {self.topic!r}"]
            raise ProvisioningError("redis", missing) from exc
        raise UnknownTopic(
            f"no stream {self.topic!r} with consumer group {self.subscription!r} "
            "(provision='none' creates neither)"
        ) from exc

    def _claim_soon(self) -> None:
        self._next_claim = 0.0

    def _read_size(self, limit: int) -> int:
        return max(limit, self.options.prefetch)

    async def _fetch(self, limit: int) -> list[Message]:
        """One read: expired pending entries first, else new ones (blocking ``poll_interval``)."""
        await self._ensure_group()
        if clock.monotonic() >= self._next_claim:
            claimed = await self._claim_expired(limit)
            if claimed:
                return claimed
            if self._cursor == "0-0":  # the whole pending entries list was looked at
                self._next_claim = clock.monotonic() + self.options.poll_interval
        doing = f"reading group {self.subscription!r} of stream {self.topic!r}"
        try:
            # The command name as bytes: redis-py then hands back the server's reply as it came
            # (``[[stream, [[id, [name, value, ...]], ...]]]``, or None when nothing came in
            # ``BLOCK``) instead of turning every entry into a tuple and a dict first;
            # read_messages takes the entries from it directly.
            reply = await self._client.execute_command(  # type: ignore[no-untyped-call]
                b"XREADGROUP",
                b"GROUP",
                self._group_b,
                self._name_b,
                b"COUNT",
                limit,
                b"BLOCK",
                _ms(self.options.poll_interval) or 1,
                b"STREAMS",
                self._topic_b,
                b">",
            )
        except Exception as exc:
            if "NOGROUP" in str(exc):
                return self._no_group(exc)
            raise translate(exc, doing, ReceiveError) from exc
        received = clock.monotonic()
        if not reply:
            return []
        now = clock.time()
        deadline = self.options.ack_deadline
        messages: list[Message] = []
        for _, entries in reply:
            messages += read_messages(self.topic, entries, self.acker, now, deadline, received + deadline)
        return messages

    async def _claim_expired(self, limit: int) -> list[Message]:
        """``XAUTOCLAIM`` entries idle for longer than the ack deadline, with their delivery counts."""
        doing = f"claiming expired entries of group {self.subscription!r} of stream {self.topic!r}"
        try:
            reply = await self._client.xautoclaim(
                self.topic,
                self.subscription,
                self.name,
                _ms(self.options.ack_deadline),
                start_id=self._cursor,
                count=limit,
            )
            received = clock.monotonic()
            cursor, entries = reply[0], reply[1]
            self._cursor = cursor.decode() if isinstance(cursor, bytes) else str(cursor)
            deleted = reply[2] if len(reply) > 2 else []
            if deleted:  # the server dropped them from the group's pending entries list already
                self.lost += len(deleted)
                log.warning(
                    "%r: %d pending entries were deleted from the stream before they were acked "
                    "(trimmed or XDEL): lost (%d so far)",
                    self,
                    len(deleted),
                    self.lost,
                )
            if not entries:
                return []
            counts = await self._delivery_counts([entry_id for entry_id, _ in entries])
            most = self.options.max_attempts
            if most is not None:
                used_up = [
                    (_text(entry_id), fields, count - 1)
                    for entry_id, fields in entries
                    if (count := counts.get(_text(entry_id), 2)) > most
                ]
                if used_up:
                    reason = f"not acked after {most} deliveries (max_attempts={most})"
                    await self.acker.move_out(used_up, reason)
                    done = {entry_id for entry_id, _, _ in used_up}
                    entries = [(i, f) for i, f in entries if _text(i) not in done]
        except Exception as exc:
            if "NOGROUP" in str(exc):
                return self._no_group(exc)
            raise translate(exc, doing, ReceiveError) from exc
        now = clock.time()
        messages = [
            to_message(self.topic, entry_id, fields, self.acker, now, counts.get(_text(entry_id), 2))
            for entry_id, fields in entries
        ]
        start_ack_deadline(messages, self.options.ack_deadline, since=received)
        return messages

    async def _delivery_counts(self, ids: list[Any]) -> dict[str, int]:
        """The delivery count of each entry id, from the pending entries list of this consumer."""
        first, last = min(ids, key=_id_key), max(ids, key=_id_key)
        pending = await self._client.xpending_range(
            self.topic, self.subscription, first, last, len(ids) * 4 + 16, consumername=self.name
        )
        return {_text(p["message_id"]): int(p["times_delivered"]) for p in pending}

    async def close(self) -> None:
        """Stop reading: wait for the read in flight, release what nobody took, leave the group."""
        if self._closed:
            return
        # (a read cut off by the bound: the pending entries it read come back after the deadline)
        left = [m.id for m in await self._stop_reading(self._settings.close_timeout)]
        await self.acker.close()
        if not self._grouped:
            return
        try:
            async with asyncio.timeout(self._settings.close_timeout):
                if left:
                    await self.acker._claim(left, NACK_IDLE_MS, "releasing entries nobody took")
                forget = self._client.eval(_FORGET_CONSUMER, 1, self.topic, self.subscription, self.name)
                await forget  # type: ignore[misc]  # redis-py types it for both clients
        except Exception as exc:
            log.warning(
                "%r: could not release its entries on close (%s); they come back after the deadline",
                self,
                exc,
            )


def _fields(message: Message) -> Mapping[bytes, bytes]:
    """The fields of the entry behind ``message`` (as read; rebuilt when ``raw`` was replaced)."""
    entry = message.raw
    if isinstance(entry, Entry):
        return entry.fields
    return to_fields(OutboundMessage(message.data, key=message.key, attributes=message.attributes))


def _entry_id(message: Message) -> str | bytes:
    """The entry id to ack ``message`` by: as the server sent it for a message ``XREADGROUP``
    brought (no id string made), else ``message.id``."""
    return message._entry_id if message.__class__ is RedisMessage else message.id


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _id_key(value: Any) -> tuple[int, int]:
    millis, _, sequence = _text(value).partition("-")
    return int(millis), int(sequence or 0)


class RedisMessageIterator(RedisMessages, PulledMessageIteration):
    """``messages()``: one entry per ``next_message()``."""


class RedisBatchedMessageIterator(RedisMessages, PulledBatchedMessageIteration):
    """``batched_messages()``: up to ``batch_size`` entries per ``next_batch()``."""

    def __init__(
        self,
        client: Redis,
        settings: RedisSettings,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
        batch_size: int,
        batch_timeout: float,
        ack_client: Redis | None = None,
    ) -> None:
        super().__init__(client, settings, topic, subscription, options, ack_client)
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
