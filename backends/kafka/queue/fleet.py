"""Run-time checks of Go-fleet combinations that misbehave (docs/kafka-queue.md, "Go interoperability").

Two mixes of our trackers and a kafka-mq-go fleet cannot be told apart from the settings of one
process, only from the markers a tracker reads:

* **A tracker outside ``go_fleet`` reads per-message markers it did not write** (a START without
  our delivery-attempt field: a kafka-mq-go consumer wrote it). If kafka-mq-go trackers watch
  the topic too, they are in their own group, so every expired message of the Go consumer is
  redelivered twice, once per group. Our tracker keeps redelivering them (a duplicate is better
  than a message nobody redelivers) and warns once: run it with ``go_fleet=True``
  (``--go-fleet``) to share kafka-mq-go's group.
* **A ``go_fleet`` tracker reads batched markers** (written by our consumers without ``go_fleet``).
  It sits in kafka-mq-go's group: a Go tracker there owns some markers partitions, cannot read
  batched markers (its decoder refuses them) and so never redelivers their messages while it
  runs. The tracker warns once (ERROR): set ``go_fleet=True`` on every consumer of the queue. As
  markers of one queue all land in one partition, possibly a Go tracker's, a ``go_fleet`` tracker
  also reads the tail of every markers partition once when it starts (:func:`scan_for_batched`).

Both count ``fleet_mismatch`` in ``QueueMetrics``.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from broker.backends.kafka.queue.markers import BatchMarker, Marker, MarkerType, decode
from broker.backends.kafka.queue.metrics import QueueMetrics
from broker.backends.kafka.queue.settings import GO_TRACKER_GROUP, QueueSettings
from broker.errors import BrokerError, DecodeError
from broker.log import Log, TopicPartition

__all__ = ["FOREIGN_PER_MESSAGE", "GO_FLEET_BATCHED", "FleetGuard", "scan_for_batched"]

log = logging.getLogger("broker.backends.kafka.queue.tracker")

#: Warning kinds (what :attr:`FleetGuard.warned` holds).
FOREIGN_PER_MESSAGE = "foreign-per-message"
GO_FLEET_BATCHED = "go-fleet-batched"


class FleetGuard:
    """Looks at every marker a tracker reads and warns (once per kind) about a misbehaving mix."""

    def __init__(self, config: QueueSettings, metrics: QueueMetrics) -> None:
        self.config = config
        self.metrics = metrics
        #: The kinds warned about so far.
        self.warned: set[str] = set()

    def check(self, tp: TopicPartition, offset: int, marker: Marker | BatchMarker) -> None:
        """Warn if ``marker`` reveals a Go-fleet mix this tracker cannot handle well."""
        if self.config.go_fleet:
            if isinstance(marker, BatchMarker):
                self._warn_batched(f"{tp.topic}[{tp.partition}]@{offset}")
        elif isinstance(marker, Marker) and marker.type is MarkerType.START and not marker.delivery_attempt:
            self.metrics.count("fleet_mismatch")
            if FOREIGN_PER_MESSAGE not in self.warned:
                self.warned.add(FOREIGN_PER_MESSAGE)
                log.warning(
                    "tracker of %r (group %r) reads per-message markers it did not write (%s[%d]@%d: a "
                    "kafka-mq-go consumer?). If kafka-mq-go trackers also watch this topic, each expired "
                    "message of that consumer is redelivered twice, once per tracker group; run this "
                    "tracker with go_fleet=True (broker queue tracker --go-fleet) to share their group %r",
                    self.config.marker_topic,
                    self.config.tracker_group,
                    tp.topic,
                    tp.partition,
                    offset,
                    GO_TRACKER_GROUP,
                )

    def _warn_batched(self, where: str) -> None:
        self.metrics.count("fleet_mismatch")
        if GO_FLEET_BATCHED in self.warned:
            return
        self.warned.add(GO_FLEET_BATCHED)
        log.error(
            "go_fleet tracker of %r reads batched markers (%s), written by consumers without go_fleet. "
            "kafka-mq-go trackers in group %r cannot read them: messages whose markers sit in a "
            "partition a Go tracker owns are not redelivered while it runs. Set go_fleet=True on every "
            "consumer of this queue (per-message markers), or run the trackers outside go_fleet",
            self.config.marker_topic,
            where,
            GO_TRACKER_GROUP,
        )


async def scan_for_batched(
    log_port: Log, guard: FleetGuard, *, tail: int = 500, timeout: float = 5.0
) -> None:
    """Read the last ``tail`` markers of every markers partition once; warn on batched markers.

    For a ``go_fleet`` tracker: markers in partitions a Go tracker owns are never read by it
    otherwise. Best effort: failures are logged at DEBUG.
    """
    topic = guard.config.marker_topic
    try:
        count = await log_port.partitions(topic)
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        for p in range(count):
            tp = TopicPartition(topic, p)
            low, high = await log_port.watermarks(tp)
            if high > low:
                starts[tp] = max(low, high - tail)
                ends[tp] = high
        if not starts:
            return
        reader = log_port.reader()
        try:
            reader.assign(starts)
            await _scan(reader, ends, guard, timeout)
        finally:
            await reader.close()
    except (BrokerError, OSError, TimeoutError) as exc:
        log.debug("scanning %r for batched markers failed: %r", topic, exc)
    except Exception:
        log.warning("scanning %r for batched markers failed", topic, exc_info=True)


async def _scan(
    reader: Any,
    ends: dict[TopicPartition, int],
    guard: FleetGuard,
    timeout: float,
) -> None:
    pending = dict(ends)
    async with asyncio.timeout(timeout):
        while pending:
            for record in await reader.poll(1000, 0.5):
                try:
                    marker = decode(record.value or b"")
                except DecodeError:
                    continue
                if isinstance(marker, BatchMarker):
                    guard._warn_batched(f"{record.topic}[{record.partition}]@{record.offset}")
                    return
            for tp in [tp for tp, high in pending.items() if reader.position(tp) >= high]:
                del pending[tp]
