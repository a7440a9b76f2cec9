"""MarkersQueue: the in-progress messages of one markers partition, by deadline and by marker offset."""

from __future__ import annotations

import heapq
import itertools

from backends.kafka.queue.markers import Marker, MarkerType, MessageId

__all__ = ["MarkersQueue"]


class MarkersQueue:
    """Started-but-not-ended messages of one markers partition.

    Two heaps: by redelivery deadline (a KEEPALIVE updates it) and by the offset of the START
    marker (the oldest is what the tracker may commit). Updates and ENDs leave stale heap entries
    behind; they are pruned lazily when they reach the top.
    """

    def __init__(self) -> None:
        self.in_progress: dict[MessageId, Marker] = {}
        self._deadline: dict[MessageId, float] = {}
        self._start_offset: dict[MessageId, int] = {}
        self._deadlines: list[tuple[float, int, MessageId]] = []
        self._offsets: list[tuple[int, MessageId]] = []
        self._seq = itertools.count()

    def __len__(self) -> int:
        return len(self.in_progress)

    def add(self, marker: Marker, marker_offset: int, timestamp: float) -> None:
        """Apply one marker read at ``marker_offset`` with record time ``timestamp`` (seconds)."""
        mid = marker.message_id
        if marker.type is MarkerType.START:
            if mid not in self.in_progress:
                self.in_progress[mid] = marker
                self._start_offset[mid] = marker_offset
                heapq.heappush(self._offsets, (marker_offset, mid))
            # A duplicate START (after a failed commit) only moves the deadline.
            self._set_deadline(mid, timestamp + marker.redeliver_after_ms / 1000)
        elif marker.type is MarkerType.END:
            if self.in_progress.pop(mid, None) is not None:
                del self._deadline[mid]
                del self._start_offset[mid]
        elif mid in self.in_progress:  # KEEPALIVE; a straggler after END never resurrects a message
            self._set_deadline(mid, timestamp + marker.redeliver_after_ms / 1000)

    def _set_deadline(self, mid: MessageId, deadline: float) -> None:
        self._deadline[mid] = deadline
        heapq.heappush(self._deadlines, (deadline, next(self._seq), mid))

    def next_deadline(self) -> float | None:
        """The earliest live deadline (None when nothing is in progress)."""
        heap = self._deadlines
        while heap and self._deadline.get(heap[0][2]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None

    def to_redeliver(self, now: float) -> list[Marker]:
        """START markers whose deadline is strictly before ``now``.

        They stay in progress (and hold back the committed offset) until their END is read;
        each is returned once per deadline.
        """
        out: list[Marker] = []
        heap = self._deadlines
        while heap and heap[0][0] < now:
            deadline, _, mid = heapq.heappop(heap)
            if self._deadline.get(mid) == deadline:
                self._deadline[mid] = float("inf")  # handed to the redeliverer; no deadline until END
                out.append(self.in_progress[mid])
        return out

    def smallest_offset(self) -> int | None:
        """The offset of the oldest in-progress START marker (None when nothing is in progress)."""
        heap = self._offsets
        while heap and self._start_offset.get(heap[0][1]) != heap[0][0]:
            heapq.heappop(heap)
        return heap[0][0] if heap else None
