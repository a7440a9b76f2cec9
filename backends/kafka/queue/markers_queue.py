"""MarkersQueue: the in-progress messages of one markers partition, by deadline and by marker offset."""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import repeat

from broker.backends.kafka.queue.markers import (
    BatchMarker,
    Handout,
    Marker,
    MarkerType,
    MessageId,
    OffsetRange,
)

__all__ = ["MarkersQueue", "Started", "spans"]

_INF = float("inf")


@dataclass(slots=True, eq=False, repr=False)  # compared and hashed by identity (dict keys)
class Started:
    """Messages one START marker began (or a part of them whose deadline moved on its own).

    ``marker`` is the per-message START (it carries the payload); ``None`` for a batched START,
    whose messages are read back from the queue topic when they are redelivered. ``handed`` is
    False while the messages were only prefetched (a START with ``prefetched``, no hand-out mark
    yet): their redelivery does not count a delivery attempt.
    """

    queue_id: str
    partition: int
    #: ``(first, last)`` offset ranges of the queue-topic partition, both ends included.
    ranges: list[tuple[int, int]]
    deadline: float
    marker_offset: int
    marker: Marker | None
    handed: bool = True
    #: How many of its messages are still in progress (owned by this entry).
    left: int = field(default=0, init=False)

    def __repr__(self) -> str:
        return (
            f"<Started {self.queue_id!r} p{self.partition} {self.ranges} left={self.left} "
            f"handed={self.handed} "
            f"deadline={self.deadline} at={self.marker_offset}>"
        )


class MarkersQueue:
    """Started-but-not-ended messages of one markers partition.

    Each message id (queue id, partition, offset) is owned by one :class:`Started` entry. Two heaps
    order the entries: by redelivery deadline and by the offset of their START marker (the oldest
    live one is what the tracker may commit). A KEEPALIVE for all of an entry's messages moves its
    deadline; for some of them, those move to a new entry (same START offset) with their own
    deadline. A START for ids already in progress (a batch read again after a failed commit) takes
    them over with its fresher deadline. ENDs leave stale heap entries behind; they are pruned
    lazily when they reach the top.
    """

    def __init__(self) -> None:
        self._owners: dict[tuple[str, int], dict[int, Started]] = {}
        self._deadlines: list[tuple[float, int, Started]] = []
        self._offsets: list[tuple[int, int, Started]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return sum(len(owners) for owners in self._owners.values())

    def __contains__(self, item: tuple[str, MessageId]) -> bool:
        queue_id, (partition, offset) = item
        owners = self._owners.get((queue_id, partition))
        return owners is not None and offset in owners

    def add(self, marker: Marker | BatchMarker, queue_id: str, marker_offset: int, timestamp: float) -> None:
        """Apply one marker of ``queue_id`` read at ``marker_offset`` with record time ``timestamp``."""
        deadline = timestamp + marker.redeliver_after_ms / 1000
        handed, handout = True, Handout.NONE
        if isinstance(marker, Marker):
            mid = marker.message_id
            ranges: Iterable[OffsetRange] = ((mid.partition, mid.offset, mid.offset),)
        else:
            ranges = marker.ranges
            handed, handout = not marker.prefetched, marker.handout
        if marker.type is MarkerType.START:
            for partition, first, last in ranges:
                entry = Started(
                    queue_id,
                    partition,
                    [(first, last)],
                    deadline,
                    marker_offset,
                    marker if isinstance(marker, Marker) else None,
                    handed,
                )
                self._own(entry, range(first, last + 1))
                if entry.left:
                    self._push(entry)
        elif marker.type is MarkerType.END:
            for partition, first, last in ranges:
                owners = self._owners.get((queue_id, partition))
                if owners:
                    # Popped in C (map), counted per entry in C (Counter): ENDs come in big ranges.
                    popped = Counter(map(owners.pop, range(first, last + 1), repeat(None)))
                    for ended, count in popped.items():
                        if ended is not None:
                            ended.left -= count
        else:  # KEEPALIVE; a straggler after END never resurrects a message
            for partition, first, last in ranges:
                self._keepalive(queue_id, partition, first, last, deadline, handout)

    def _own(self, entry: Started, offsets: range | list[int]) -> None:
        owners = self._owners.setdefault((entry.queue_id, entry.partition), {})
        if owners.keys().isdisjoint(offsets):
            owners.update(dict.fromkeys(offsets, entry))
            entry.left += len(offsets)
            return
        for offset in offsets:
            previous = owners.get(offset)
            if previous is entry:
                continue
            if previous is not None:
                previous.left -= 1
            owners[offset] = entry
            entry.left += 1

    def _push(self, entry: Started) -> None:
        seq = next(self._seq)
        heapq.heappush(self._deadlines, (entry.deadline, seq, entry))
        heapq.heappush(self._offsets, (entry.marker_offset, seq, entry))

    def _keepalive(
        self, queue_id: str, partition: int, first: int, last: int, deadline: float, handout: Handout
    ) -> None:
        owners = self._owners.get((queue_id, partition))
        if not owners:
            return
        groups: dict[Started, list[int]] = {}
        get = owners.get
        for offset in range(first, last + 1):
            entry = get(offset)
            if entry is not None:
                group = groups.get(entry)
                if group is None:
                    groups[entry] = [offset]
                else:
                    group.append(offset)
        for entry, offsets in groups.items():
            handed = entry.handed if handout is Handout.NONE else handout is Handout.HANDED
            if len(offsets) == entry.left:
                entry.deadline = deadline
                entry.handed = handed
                heapq.heappush(self._deadlines, (deadline, next(self._seq), entry))
            else:
                part = Started(
                    queue_id,
                    partition,
                    spans(offsets),
                    deadline,
                    entry.marker_offset,
                    entry.marker,
                    handed,
                )
                self._own(part, offsets)
                self._push(part)

    def next_deadline(self) -> float | None:
        """The earliest live deadline (None when nothing is in progress)."""
        heap = self._deadlines
        while heap and (heap[0][2].left <= 0 or heap[0][2].deadline != heap[0][0]):
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def to_redeliver(self, now: float) -> list[tuple[Started, list[int]]]:
        """Entries whose deadline is strictly before ``now``, with the offsets they still own.

        Those messages stay in progress (and hold back the committed offset) until their END is
        read; each entry is returned once per deadline.
        """
        out: list[tuple[Started, list[int]]] = []
        heap = self._deadlines
        while heap and heap[0][0] < now:
            deadline, _, entry = heapq.heappop(heap)
            if entry.left > 0 and entry.deadline == deadline:
                entry.deadline = _INF  # handed to the redeliverer; no deadline until END
                out.append((entry, self.owned(entry)))
        return out

    def owned(self, entry: Started) -> list[int]:
        """The offsets ``entry`` still owns (in progress, not taken over by a newer entry)."""
        owners = self._owners.get((entry.queue_id, entry.partition), {})
        return [o for first, last in entry.ranges for o in range(first, last + 1) if owners.get(o) is entry]

    def smallest_offset(self) -> int | None:
        """The offset of the oldest in-progress START marker (None when nothing is in progress)."""
        heap = self._offsets
        while heap and heap[0][2].left <= 0:
            heapq.heappop(heap)
        return heap[0][0] if heap else None


def spans(offsets: list[int]) -> list[tuple[int, int]]:
    """Ascending offsets as ``(first, last)`` runs."""
    out: list[tuple[int, int]] = []
    first = last = offsets[0]
    for offset in offsets[1:]:
        if offset == last + 1:
            last = offset
        else:
            out.append((first, last))
            first = last = offset
    out.append((first, last))
    return out
