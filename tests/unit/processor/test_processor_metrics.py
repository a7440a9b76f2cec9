"""A processor's stats as OpenTelemetry metrics (ProcessorMetrics), read by the SDK's in-memory reader."""

from __future__ import annotations

from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from broker.backends.kafka.processor import Context, Tester, define_group, input, output, persist
from broker.backends.kafka.processor.telemetry import PROCESSOR_METRICS, ProcessorMetrics
from broker.errors import ConfigError


def _graph() -> Any:
    def order(ctx: Context, value: Any) -> None:
        ctx.set_value((ctx.value() or 0) + 1)
        ctx.emit("invoices", ctx.key, f"invoice for {value}")

    return define_group("billing", input("orders", "str", order), output("invoices", "str"), persist("int64"))


def _points(reader: InMemoryMetricReader) -> dict[str, dict[tuple[tuple[str, Any], ...], Any]]:
    out: dict[str, dict[tuple[tuple[str, Any], ...], Any]] = {}
    data = reader.get_metrics_data()
    assert data is not None
    for resource in data.resource_metrics:
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                for point in metric.data.data_points:
                    labels = tuple(sorted((point.attributes or {}).items()))
                    out.setdefault(metric.name, {})[labels] = point.value
    return out


async def test_the_processors_counts_lag_and_table_reach_opentelemetry() -> None:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    async with Tester(partitions=1) as tester:
        processor = await tester.processor(_graph())
        for key in ("alice", "bob", "alice"):
            await tester.consume("orders", key, "book")
        async with ProcessorMetrics(processor, provider, interval=3600) as metrics:
            await metrics.refresh()
            found = _points(reader)
    assert set(found) == set(PROCESSOR_METRICS)
    orders = (("group", "billing"), ("partition", "0"), ("topic", "orders"))
    assert found["polybroker.processor.consumed"][orders] == 3
    assert found["polybroker.processor.consumed.bytes"][orders] == 3 * len(b"book")
    assert found["polybroker.processor.lag"][orders] == 0
    invoices = (("group", "billing"), ("partition", "0"), ("topic", "invoices"))
    assert found["polybroker.processor.emitted"][invoices] == 3
    table = (("group", "billing"), ("partition", "0"), ("topic", "billing-table"))
    assert found["polybroker.processor.table.writes"][table] == 3
    assert found["polybroker.processor.table.recovering"][table] == 0
    for series in found.values():  # bounded labels: no key or value of a message
        for labels in series:
            assert {name for name, _ in labels} == {"group", "topic", "partition"}


async def test_a_bad_interval_is_a_config_error() -> None:
    async with Tester() as tester:
        processor = await tester.processor(_graph())
        with pytest.raises(ConfigError):
            ProcessorMetrics(processor, MeterProvider(), interval=0)
