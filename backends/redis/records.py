"""``records()``: a stream read as a partitioned log with one partition (partition 0).

**Offsets.** An entry id ``<ms>-<seq>`` is the offset ``ms * 2**20 + seq`` (:func:`offset_of`), and
an offset maps back to exactly that id (:func:`entry_id`): offsets order as ids do. The bound is on
the sequence: ``XADD *`` numbers the entries of one millisecond from 0, so a stream would need a
million entries in one millisecond to pass it; an entry whose id another client chose with a
sequence of ``2**20`` or more cannot be given an offset, and reading it raises ``ReceiveError``
(naming the entry) instead of handing out a wrong offset. Offsets of today's ids are below ``2**62``.

**Reading.** A reader keeps its position (an entry id) and reads after it with ``XREAD COUNT
batch_size`` in a ``MULTI`` with ``XINFO STREAM`` (to see what was trimmed, below); when nothing
is new it waits with a blocking ``XREAD ... BLOCK poll_interval``. Reading needs no consumer group
and leaves no pending entries: records are not acknowledged one by one, the group commits a
position.

**Committing.** A group is a consumer group of the stream, named ``group``; its committed position
is the group's ``last-delivered-id`` (and ``entries-read``), which ``Record.ack()`` sets with
``XGROUP SETID <stream> <group> <id> ENTRIESREAD <n>``, through a script that moves it forward
only: acking a record commits it and every lower offset, and acking a lower one later changes
nothing. A reader starts after the group's committed position, so another process reading in the
same group continues from the last commit; a raw redis-py client sees the commit, and the group's
``lag``, in ``XINFO GROUPS`` (:meth:`~broker.backends.redis.backend.RedisBackend.backlog` reads it).
The group is created (``XGROUP CREATE ... MKSTREAM``) by the first reader under ``provision=create``,
at the stream's start (``start=earliest``, the default) or end (``start=latest``); under ``verify`` a
missing stream or group is a ``ProvisioningError``, under ``none`` an ``UnknownTopic``, and nothing
is created. A records group is not a ``messages()`` subscription: give the two different names.

**Replay.** ``start_offset`` (inclusive) or ``start_time`` (POSIX seconds: the first entry whose id's
milliseconds are at or after it) make a reader start there instead of at the commit; what it acks
is committed as usual, never moving the group backwards (``XGROUP SETID`` by hand rewinds a group).

**One partition, one reader.** Nothing arbitrates between readers of one group: each reads from the
commit on, so two open readers of one group both read what follows it (as two Kafka consumers
assigned the same partition by hand would), and the commit is the furthest either acked. Run one
reader per group at a time; several groups read the same stream independently.

**Gaps.** Redis trims entries (``max_length`` / ``max_age``, or an operator's ``XTRIM`` / ``XDEL``)
whether or not a group has read them. An entry removed before the reader came to it is a gap: the
reader goes on with the first entry retained, logs a warning on ``broker.backends.redis`` and counts
the gap in ``gaps`` and the entries missed in ``lost`` (exact for entries trimmed from the stream's
start, which is what retention does; an ``XDEL`` in the middle counts a gap of unknown size, and
the group's ``entries-read`` is then left to the server's estimate).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from typing import Any, Self

from redis.asyncio import Redis

from broker import Record, RecordBatch
from broker.backends.redis.errors import translate
from broker.backends.redis.mapping import LogEntry, to_record
from broker.backends.redis.settings import RecordOptions, RedisSettings
from broker.driver.clock import clock
from broker.driver.resources import BatchedRecordIteration, RecordIteration
from broker.errors import (
    AckError,
    ClosedError,
    ConfigError,
    ProvisioningError,
    ReceiveError,
    Timeout,
    UnknownTopic,
)

__all__ = [
    "SEQUENCE_BITS",
    "RedisBatchedRecordIterator",
    "RedisRecordIterator",
    "RedisRecords",
    "entry_id",
    "offset_of",
]

log = logging.getLogger("broker.backends.redis")

#: Bits of an offset that hold the id's sequence: ``offset = ms * 2**SEQUENCE_BITS + seq``.
SEQUENCE_BITS = 20
_SEQUENCE_MASK = (1 << SEQUENCE_BITS) - 1
#: The largest sequence an entry id can have (Redis' 64-bit unsigned sequence).
_MAX_SEQUENCE = (1 << 64) - 1

#: Sets the group's position to ARGV[2] (with ENTRIESREAD ARGV[3] unless empty) when that is after
#: its current one: 1 moved, 0 not after it (nothing changes), -1 no such stream or group.
_COMMIT = """
local function after(a, b)
  local ams, aseq = string.match(a, '^(%d+)-(%d+)$')
  local bms, bseq = string.match(b, '^(%d+)-(%d+)$')
  if #ams ~= #bms then return #ams > #bms end
  if ams ~= bms then return ams > bms end
  if #aseq ~= #bseq then return #aseq > #bseq end
  return aseq > bseq
end
local groups = redis.pcall('XINFO', 'GROUPS', KEYS[1])
if type(groups) ~= 'table' or groups['err'] then return -1 end
for _, group in ipairs(groups) do
  local name, last
  for i = 1, #group, 2 do
    if group[i] == 'name' then name = group[i + 1] end
    if group[i] == 'last-delivered-id' then last = group[i + 1] end
  end
  if name == ARGV[1] then
    if not after(ARGV[2], last) then return 0 end
    if ARGV[3] == '' then
      redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], ARGV[2])
    else
      redis.call('XGROUP', 'SETID', KEYS[1], ARGV[1], ARGV[2], 'ENTRIESREAD', ARGV[3])
    end
    return 1
  end
end
return -1
"""


def _split(ident: str) -> tuple[int, int]:
    ms, _, seq = ident.partition("-")
    return int(ms), int(seq or 0)


def offset_of(ident: str) -> int:
    """The offset of the entry id ``ident`` (``ms * 2**20 + seq``); ``ReceiveError`` for an id whose
    sequence is ``2**20`` or more (see the module)."""
    ms, seq = _split(ident)
    if seq > _SEQUENCE_MASK:
        raise ReceiveError(
            f"entry {ident!r} has a sequence of {seq}: records() maps ids to offsets for sequences "
            f"below 2**{SEQUENCE_BITS} only (entries another client added with an explicit id)"
        )
    return (ms << SEQUENCE_BITS) | seq


def entry_id(offset: int) -> str:
    """The entry id of ``offset`` (the inverse of :func:`offset_of`); ``ConfigError`` below 0."""
    if isinstance(offset, bool) or not isinstance(offset, int) or offset < 0:
        raise ConfigError(f"an offset is an integer >= 0, got {offset!r}")
    return f"{offset >> SEQUENCE_BITS}-{offset & _SEQUENCE_MASK}"


def _before(ms: int, seq: int) -> str:
    """The id just before ``ms-seq`` (``XREAD`` reads after the id it is given)."""
    if seq > 0:
        return f"{ms}-{seq - 1}"
    if ms > 0:
        return f"{ms - 1}-{_MAX_SEQUENCE}"
    return "0-0"


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _ms(seconds: float) -> int:
    return max(0, int(seconds * 1000))


class _GroupCommit:
    """The :class:`~broker.message.Committer` of a reader's records: the group's position moves
    forward to the record (``XGROUP SETID``, see the module)."""

    __slots__ = ("_client", "_group", "_script", "_stream")

    def __init__(self, client: Redis, stream: str, group: str) -> None:
        self._client = client
        self._stream = stream
        self._group = group
        self._script = client.register_script(_COMMIT)

    async def commit(self, record: Record) -> None:
        """Commit ``record`` and every lower offset of the stream for the group."""
        entry = record.raw
        if not isinstance(entry, LogEntry):
            raise AckError(f"record {record.topic}@{record.offset} was not read by a Redis records() reader")
        read = "" if entry.entries_read is None else str(entry.entries_read)
        doing = f"committing {entry.id} for group {self._group!r} of stream {self._stream!r}"
        try:
            moved = await self._script(keys=[self._stream], args=[self._group, entry.id, read])
        except Exception as exc:
            raise translate(exc, doing, AckError) from exc
        if moved == -1:
            raise AckError(f"{doing}: no such group (deleted while it was read)")


class RedisRecords:
    """One reader of a stream for a group: its position, what it read ahead, its gaps."""

    def __init__(
        self, client: Redis, settings: RedisSettings, topic: str, group: str, options: RecordOptions
    ) -> None:
        self._client = client
        self._settings = settings
        self.topic = topic
        self.group = group
        self.options = options
        self.committer = _GroupCommit(client, topic, group)
        self._buffer: deque[Record] = deque()
        self._position: str | None = None  # the id read up to (None: not positioned yet)
        #: Entries the stream had received up to the position, when known (the group's counter).
        self._entries_read: int | None = None
        #: The next read takes what it finds as the start, reporting no gap (a new group, a seek).
        self._adopt = False
        #: The largest id removed by ``XDEL`` already looked at.
        self._deleted_seen = "0-0"
        self._lock = asyncio.Lock()
        self._closed = False
        #: Gaps found: entries removed from the stream before this reader read them.
        self.gaps = 0
        #: Entries known to be lost in those gaps (trimmed before they were read).
        self.lost = 0

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic!r} group={self.group!r}>"

    @property
    def closed(self) -> bool:
        """True once closed."""
        return self._closed

    def _where(self) -> str:
        return f"group {self.group!r} of stream {self.topic!r}"

    async def _ensure_position(self) -> None:
        """Find (or, under ``create``, make) the group and place the reader after its commit, or
        where ``start_offset`` / ``start_time`` say."""
        if self._position is not None:
            return
        provision = self._settings.provision
        created = False
        if provision == "create":
            start = "0" if self.options.start == "earliest" else "$"
            try:
                created = bool(
                    await self._client.xgroup_create(self.topic, self.group, id=start, mkstream=True)
                )
            except Exception as exc:
                if "BUSYGROUP" not in str(exc):
                    raise translate(exc, f"creating {self._where()}", ReceiveError) from exc
        try:
            groups = await self._client.xinfo_groups(self.topic)
        except Exception as exc:
            if "no such key" not in str(exc).lower():
                raise translate(exc, f"reading {self._where()}", ReceiveError) from exc
            groups = []
        found = next((g for g in groups if _text(g.get("name")) == self.group), None)
        if found is None:
            self._missing()
        assert found is not None
        options = self.options
        self._adopt = created
        if options.start_offset is not None or options.start_time is not None:
            if options.start_offset is not None:
                self._position = _before(*_split(entry_id(options.start_offset)))
            else:
                self._position = _before(int((options.start_time or 0.0) * 1000), 0)
            self._entries_read, self._adopt = None, True
            return
        self._position = _text(found.get("last-delivered-id"))
        read = found.get("entries-read")
        # no entry has the id 0-0: a group there has read none, whatever the server says
        self._entries_read = int(read) if read is not None else 0 if self._position == "0-0" else None

    def _missing(self) -> None:
        """The stream or the group is missing (and may not be made): the provisioning error."""
        if self._settings.provision == "verify":
            raise ProvisioningError("redis", [f"consumer group {self.group!r} of stream {self.topic!r}"])
        if self._settings.provision == "none":
            raise UnknownTopic(f"no {self._where()} (provision='none' creates neither)")
        raise ReceiveError(f"{self._where()} vanished as it was created")

    async def take(self, limit: int, timeout: float | None) -> list[Record]:
        """Up to ``limit`` records, as soon as any came; ``Timeout`` after ``timeout`` seconds."""
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        due = None if timeout is None else clock.monotonic() + timeout
        async with self._lock:  # one read at a time: the position moves in order
            while not self._buffer:
                if self._closed:
                    raise ClosedError(f"{self!r} is closed")
                await self._ensure_position()
                if await self._read():
                    break
                left = None if due is None else due - clock.monotonic()
                # at most command_timeout: the client's socket timeout is longer than that
                wait = min(self.options.poll_interval, self._settings.command_timeout)
                if left is not None:
                    wait = min(wait, left)
                if _ms(wait) < 1:
                    raise Timeout(f"no record on {self.topic!r} within {timeout}s")
                await self._wait(wait)
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            count = min(limit, len(self._buffer))
            return [self._buffer.popleft() for _ in range(count)]

    async def _wait(self, seconds: float) -> None:
        """Block until an entry after the position is added, ``seconds`` at most (what the blocking
        read returns is read again in a ``MULTI``, which sees what was trimmed)."""
        try:
            await self._client.xread({self.topic: self._position}, count=1, block=_ms(seconds) or 1)  # type: ignore[dict-item]
        except Exception as exc:
            raise translate(exc, f"reading {self._where()}", ReceiveError) from exc

    async def _read(self) -> bool:
        """One ``XREAD`` after the position (with ``XINFO STREAM``, atomically); True when it read any."""
        doing = f"reading {self._where()}"
        pipeline = self._client.pipeline(transaction=True)
        pipeline.xread({self.topic: self._position}, count=self.options.batch_size)  # type: ignore[dict-item]
        pipeline.xinfo_stream(self.topic)
        try:
            reply, info = await pipeline.execute()
        except Exception as exc:
            if "no such key" in str(exc).lower():  # the stream is gone (and its group with it)
                if self._settings.provision == "create":
                    self._position = None  # made again, from its start, on the next read
                    self._deleted_seen = "0-0"
                    return False
                self._missing()
            raise translate(exc, doing, ReceiveError) from exc
        if not reply:
            return False
        entries = reply[0][1]
        first = _text(entries[0][0])
        offsets: list[int] = []
        for ident, _ in entries:  # before any state changes
            try:
                offsets.append(offset_of(_text(ident)))
            except ReceiveError:
                if not offsets:
                    raise
                entries = entries[: len(offsets)]  # what comes before it first; the next read raises
                break
        self._look_for_a_gap(first, info)
        now = clock.time()
        read = self._entries_read
        committer = self.committer
        for (ident, fields), offset in zip(entries, offsets, strict=True):
            if read is not None:
                read += 1
            self._buffer.append(
                to_record(self.topic, _text(ident), offset, fields or {}, read, committer, now)
            )
        self._entries_read = read
        self._position = _text(entries[-1][0])
        return True

    def _look_for_a_gap(self, first: str, info: dict[str, Any]) -> None:
        """Find entries removed after the position before they were read (the first read after a
        new group or a seek takes what it finds as its start); count and log them.

        ``first`` is the first entry read, ``info`` the ``XINFO STREAM`` of the same ``MULTI``.
        Trimming removes from the stream's start (the server counts ``entries-added`` and keeps
        ``length``); ``XDEL`` raises ``max-deleted-entry-id``.
        """
        assert self._position is not None
        deleted = _split(_text(info.get("max-deleted-entry-id") or "0-0"))
        head = info.get("first-entry")
        adopt, self._adopt = self._adopt, False
        known = self._entries_read
        if head and _text(head[0]) == first and deleted < _split(first):
            # the first entry read is the stream's first, with nothing XDEL'd after it: exactly
            # entries-added - length entries came before it
            before = int(info["entries-added"]) - int(info["length"])
            self._entries_read = before
            lost = None if known is None else before - known
            if adopt or lost is None or lost <= 0:
                return
        else:
            seen = max(_split(self._position), _split(self._deleted_seen))
            if deleted <= seen:
                return  # nothing removed after the position: the count goes on
            self._deleted_seen = f"{deleted[0]}-{deleted[1]}"
            self._entries_read = lost = None  # XDEL'd after the position: a gap of unknown size
            if adopt:
                return
        self.gaps += 1
        if lost is not None:
            self.lost += lost
        log.warning(
            "%r: %s entries after %s were removed from the stream (trimmed or XDEL) before they were "
            "read: lost; reading on from %s (%d lost so far)",
            self,
            "some" if lost is None else lost,
            self._position,
            first,
            self.lost,
        )

    async def open(self) -> None:
        """Place the reader (create the group where allowed): errors show at ``async with``."""
        if self._closed:
            raise ClosedError(f"{self!r} is closed")
        async with self._lock:
            await self._ensure_position()

    def close(self) -> None:
        """Stop reading; a read in flight ends within ``poll_interval`` with ``ClosedError``."""
        self._closed = True
        self._buffer.clear()


class RedisRecordIterator(RecordIteration):
    """A ``RecordIterator`` over a stream, in a group (see the module); ``next_batch`` works too."""

    def __init__(
        self, client: Redis, settings: RedisSettings, topic: str, group: str, options: RecordOptions
    ) -> None:
        self.reader = RedisRecords(client, settings, topic, group, options)

    def __repr__(self) -> str:
        return f"<RedisRecordIterator {self.reader.topic!r} group={self.reader.group!r}>"

    @property
    def gaps(self) -> int:
        """Gaps found: entries removed from the stream before this reader read them."""
        return self.reader.gaps

    @property
    def lost(self) -> int:
        """Entries known to be lost in those gaps."""
        return self.reader.lost

    async def next_record(self, timeout: float | None = None) -> Record:
        """The next record; ``Timeout`` when none came within ``timeout`` seconds."""
        (record,) = await self.reader.take(1, timeout)
        return record

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """The records read ahead, or the next read's (up to ``batch_size``); ``[]`` after ``timeout``."""
        try:
            return await self.reader.take(self.reader.options.batch_size, timeout)
        except Timeout:
            return []

    async def __aenter__(self) -> Self:
        await self.reader.open()
        return self

    async def close(self) -> None:
        """Stop reading (the group keeps its commit). Idempotent."""
        self.reader.close()


class RedisBatchedRecordIterator(BatchedRecordIteration):
    """A ``BatchedIterator`` of records: batches of up to ``batch_size`` within ``batch_timeout``."""

    def __init__(
        self,
        client: Redis,
        settings: RedisSettings,
        topic: str,
        group: str,
        options: RecordOptions,
        batch_size: int,
        batch_timeout: float,
    ) -> None:
        self.reader = RedisRecords(client, settings, topic, group, options)
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout

    def __repr__(self) -> str:
        return f"<RedisBatchedRecordIterator {self.reader.topic!r} group={self.reader.group!r}>"

    @property
    def gaps(self) -> int:
        """Gaps found: entries removed from the stream before this reader read them."""
        return self.reader.gaps

    @property
    def lost(self) -> int:
        """Entries known to be lost in those gaps."""
        return self.reader.lost

    async def next_batch(self, timeout: float | None = None) -> list[Record]:
        """Up to ``batch_size`` records, as soon as any came; ``[]`` after ``timeout`` (default
        ``batch_timeout``) seconds."""
        try:
            records = await self.reader.take(
                self.batch_size, self.batch_timeout if timeout is None else timeout
            )
        except Timeout:
            return []
        return RecordBatch(records, {(self.reader.topic, 0): records[-1]})

    async def __aenter__(self) -> Self:
        await self.reader.open()
        return self

    async def close(self) -> None:
        """Stop reading (the group keeps its commit). Idempotent."""
        self.reader.close()
