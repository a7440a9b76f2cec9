"""A processor's figures as OpenTelemetry metrics (opt-in, the ``otel`` extra).

:meth:`Processor.stats` is a snapshot: per owned partition, how many messages and bytes each input
topic gave and how far behind its high watermark it is, what was emitted to each output, and each
table's recovery. :class:`ProcessorMetrics` reads it every ``interval`` seconds and serves the last
snapshot to OpenTelemetry's observable instruments, so the figures reach the same meter provider as
:mod:`broker.telemetry`'s::

    from broker.backends.kafka.processor.telemetry import ProcessorMetrics

    async with processor, ProcessorMetrics(processor, meter_provider):
        await processor.run()

Instruments (:data:`PROCESSOR_METRICS`), labelled with ``group``, ``topic`` and ``partition`` (values
from the graph and the partition count, never from a message):

* ``polybroker.processor.consumed`` / ``polybroker.processor.consumed.bytes`` — counters of an input;
* ``polybroker.processor.lag`` — gauge: messages of an input behind its high watermark;
* ``polybroker.processor.emitted`` / ``polybroker.processor.emitted.bytes`` — counters of an output;
* ``polybroker.processor.table.writes`` — counter of the group table's writes;
* ``polybroker.processor.table.recovering`` — gauge, 1 while a table partition is recovering.

The counters are per partition and start again from zero when a partition moves to this processor
(a counter reset, as after a restart). OpenTelemetry is imported when a :class:`ProcessorMetrics` is
made, not before; a failed refresh is logged and the last snapshot stays.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator, Mapping
from types import TracebackType
from typing import Any, Final, Self

from broker.backends.kafka.processor.stats import ProcessorStats
from broker.backends.kafka.processor.table import TableStatus
from broker.driver.otel import otel as _otel
from broker.driver.resources import stop_task
from broker.errors import ConfigError

__all__ = ["PROCESSOR_METRICS", "ProcessorMetrics"]

log = logging.getLogger("broker.processor.telemetry")

#: Instrument name -> (kind, unit, description).
PROCESSOR_METRICS: Final[Mapping[str, tuple[str, str, str]]] = {
    "polybroker.processor.consumed": ("counter", "{message}", "Messages an input topic's partition gave."),
    "polybroker.processor.consumed.bytes": ("counter", "By", "Payload bytes an input partition gave."),
    "polybroker.processor.lag": ("gauge", "{message}", "Messages of an input partition behind its end."),
    "polybroker.processor.emitted": ("counter", "{message}", "Messages emitted to an output topic."),
    "polybroker.processor.emitted.bytes": ("counter", "By", "Payload bytes emitted to an output topic."),
    "polybroker.processor.table.writes": ("counter", "{write}", "Writes to the group table's partition."),
    "polybroker.processor.table.recovering": ("gauge", "1", "1 while a table partition is recovering."),
}

Point = tuple[float, dict[str, str]]


def points(stats: ProcessorStats, group: str, table_topic: str | None) -> dict[str, list[Point]]:
    """Each instrument's points in ``stats`` (pure: what the callbacks report)."""
    out: dict[str, list[Point]] = {name: [] for name in PROCESSOR_METRICS}
    for partition, part in sorted(stats.group.items()):
        for topic, given in part.inputs.items():
            labels = {"group": group, "topic": topic, "partition": str(partition)}
            out["polybroker.processor.consumed"].append((given.count, labels))
            out["polybroker.processor.consumed.bytes"].append((given.bytes, labels))
            out["polybroker.processor.lag"].append((given.lag, labels))
        for topic, sent in part.outputs.items():
            labels = {"group": group, "topic": topic, "partition": str(partition)}
            out["polybroker.processor.emitted"].append((sent.count, labels))
            out["polybroker.processor.emitted.bytes"].append((sent.bytes, labels))
        if part.table is not None:
            labels = {"group": group, "topic": table_topic or f"{group}-table", "partition": str(partition)}
            out["polybroker.processor.table.writes"].append((part.table.writes, labels))
            recovering = 1 if part.table.status is TableStatus.RECOVERING else 0
            out["polybroker.processor.table.recovering"].append((recovering, labels))
    return out


class ProcessorMetrics:
    """Reads ``processor.stats()`` every ``interval`` seconds into observable instruments.

    An async context manager: entering takes a first snapshot and starts the refresh task, leaving
    stops it. ``refresh()`` takes a snapshot now.
    """

    def __init__(self, processor: Any, meter_provider: Any = None, *, interval: float = 15.0) -> None:
        if not interval > 0:
            raise ConfigError(f"interval must be > 0 seconds, got {interval!r}")
        otel = _otel()
        from broker import __version__

        self.processor = processor
        self.interval = interval
        self.group: str = processor.graph.group
        table = getattr(processor.graph, "table_topic", None)
        self._table_topic: str | None = None if table is None else str(table)
        self._points: dict[str, list[Point]] = {name: [] for name in PROCESSOR_METRICS}
        self._task: asyncio.Task[None] | None = None
        meter = otel.metrics.get_meter("polybroker", __version__, meter_provider=meter_provider)
        for name, (kind, unit, description) in PROCESSOR_METRICS.items():
            make = meter.create_observable_counter if kind == "counter" else meter.create_observable_gauge
            make(name, callbacks=[self._callback(name, otel)], unit=unit, description=description)

    def _callback(self, name: str, otel: Any) -> Any:
        observation = otel.metrics.Observation

        def observe(options: Any) -> Iterator[Any]:
            for value, labels in self._points[name]:
                yield observation(value, labels)

        return observe

    async def refresh(self) -> None:
        """Take a snapshot of the processor's stats now."""
        self._points = points(await self.processor.stats(), self.group, self._table_topic)

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                await self.refresh()
            except Exception as exc:  # the last snapshot stays; the processor runs on
                log.warning("could not read the stats of processor %r: %r", self.group, exc)

    async def __aenter__(self) -> Self:
        await self.refresh()
        self._task = asyncio.ensure_future(self._loop())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        """Stop refreshing (the last snapshot stays observable)."""
        task, self._task = self._task, None
        await stop_task(task)
