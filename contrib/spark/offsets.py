"""Source offsets as Spark checkpoints them: ``{topic: {partition: next offset}}``, plain JSON.

One shape for every replayable backend: Kafka (``{"orders": {"0": 1200, "1": 1187}}``),
JetStream (partition ``"0"``, offsets are stream sequences: ``{"orders.eu": {"0": 53}}``) and
Pulsar (packed message ids). A range ``[start, end)`` of one partition is one Spark task.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from broker.errors import ConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "Offsets",
    "Range",
    "limit_offsets",
    "parse_position",
    "plan_ranges",
    "resolve_position",
]

#: ``{topic: {partition (as text): next offset}}``.
Offsets = dict[str, dict[str, int]]

#: In a JSON position: start at the first retained record / after the last one.
EARLIEST = -2
LATEST = -1


@dataclass(frozen=True, slots=True)
class Range:
    """The records ``[start, end)`` of one partition of one topic."""

    topic: str
    partition: int
    start: int
    end: int

    @property
    def size(self) -> int:
        """How many offsets the range spans (records on Kafka; fewer with gaps or filters)."""
        return self.end - self.start


def parse_position(text: str | None, default: str) -> str | Offsets:
    """``"earliest"``, ``"latest"`` or a JSON ``{topic: {partition: offset}}`` (-2 earliest, -1 latest)."""
    value = (text or default).strip()
    if value.lower() in ("earliest", "latest"):
        return value.lower()
    try:
        loaded = json.loads(value)
    except ValueError:
        raise ConfigError(
            f"a position is 'earliest', 'latest' or JSON like {{\"topic\": {{\"0\": 42}}}}; got {value!r}"
        ) from None
    if not isinstance(loaded, dict):
        raise ConfigError(f"a JSON position must be an object of topics, got {value!r}")
    out: Offsets = {}
    for topic, partitions in loaded.items():
        if not isinstance(partitions, dict):
            raise ConfigError(f"position of topic {topic!r} must map partitions to offsets")
        out[str(topic)] = {str(int(p)): int(o) for p, o in partitions.items()}
    return out


def resolve_position(position: str | Offsets, earliest: Offsets, latest: Offsets) -> Offsets:
    """Concrete offsets for ``position`` given the partitions' current bounds.

    Partitions a JSON position leaves out start at the earliest offset; ``-2``/``-1`` mean
    earliest/latest. Offsets below the earliest are kept: reading them reports lost data.
    """
    if position == "earliest":
        return _copy(earliest)
    if position == "latest":
        return _copy(latest)
    assert isinstance(position, dict)
    out = _copy(earliest)
    for topic, partitions in position.items():
        if topic not in out:
            raise ConfigError(f"the position names topic {topic!r}, which this source does not read")
        for partition, offset in partitions.items():
            if partition not in out[topic]:
                raise ConfigError(f"the position names {topic}[{partition}], which does not exist")
            if offset == EARLIEST:
                continue
            out[topic][partition] = latest[topic][partition] if offset == LATEST else offset
    return out


def _copy(offsets: Mapping[str, Mapping[str, int]]) -> Offsets:
    return {t: dict(ps) for t, ps in offsets.items()}


def plan_ranges(
    start: Mapping[str, Any], end: Mapping[str, Any], earliest: Offsets | None = None
) -> list[Range]:
    """The non-empty ranges between two offsets; partitions new in ``end`` start at ``earliest``."""
    out = []
    for topic, partitions in end.items():
        before = start.get(topic, {})
        first = (earliest or {}).get(topic, {})
        for partition, stop in partitions.items():
            begin = int(before.get(partition, first.get(partition, 0)))
            if begin < int(stop):
                out.append(Range(topic, int(partition), begin, int(stop)))
    return out


def limit_offsets(start: Mapping[str, Any], end: Offsets, max_records: int) -> Offsets:
    """``end`` moved back so at most ``max_records`` offsets are read past ``start`` in total.

    The budget is shared in proportion to each partition's backlog (as Spark's Kafka source
    does), and every partition with a backlog advances by at least one offset.
    """
    if max_records < 1:
        raise ConfigError(f"maxRecordsPerTrigger must be >= 1, got {max_records}")
    backlog: dict[tuple[str, str], int] = {}
    for topic, partitions in end.items():
        for partition, stop in partitions.items():
            begin = int(start.get(topic, {}).get(partition, stop))
            if stop > begin:
                backlog[(topic, partition)] = stop - begin
    total = sum(backlog.values())
    if total <= max_records:
        return _copy(end)
    out = _copy(end)
    for (topic, partition), lag in backlog.items():
        share = max(1, lag * max_records // total)
        begin = int(start.get(topic, {}).get(partition, end[topic][partition]))
        out[topic][partition] = begin + min(lag, share)
    return out
