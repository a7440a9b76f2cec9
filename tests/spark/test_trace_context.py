"""The sink's trace context options (no Spark session: the row conversion and the driver helper)."""

from __future__ import annotations

from opentelemetry.sdk.trace import TracerProvider

import broker.contrib.spark
from broker.contrib.spark.options import Options
from broker.contrib.spark.sink import _rows, trace_attributes, trace_options

OTHER = "00-" + "a" * 32 + "-" + "b" * 16 + "-01"


def test_trace_options_carry_the_drivers_current_context() -> None:
    provider = TracerProvider()
    tracer = provider.get_tracer("test")
    assert trace_options() == {}  # no span: nothing to carry
    with tracer.start_as_current_span("nightly export") as span:
        options = broker.contrib.spark.trace_options()
    context = span.get_span_context()
    assert list(options) == ["trace.traceparent"]
    assert options["trace.traceparent"].startswith(f"00-{context.trace_id:032x}-{context.span_id:016x}-")
    provider.shutdown()


def test_rows_without_a_traceparent_get_the_options_context_and_others_keep_theirs() -> None:
    from broker.contrib.spark.arrow import pa

    arrow = pa()
    options = Options(
        {"trace.traceparent": OTHER.replace("a", "c"), "Trace.TraceState": "k=v", "topic": "out"}
    )
    trace = trace_attributes(options)
    assert trace == {"traceparent": OTHER.replace("a", "c"), "tracestate": "k=v"}
    batch = arrow.RecordBatch.from_pydict(
        {
            "value": arrow.array([b"v", b"w"], arrow.binary()),
            "attributes": arrow.array(
                [[("traceparent", OTHER)], [("n", "1")]], arrow.map_(arrow.string(), arrow.string())
            ),
        }
    )
    [own, given] = _rows(batch, "out", None, "base", 0, trace).by_topic["out"]
    assert own.attributes == {"traceparent": OTHER}
    assert given.attributes == {"n": "1", **trace}
    [plain, _] = _rows(batch, "out", None, "base", 0).by_topic["out"]  # no option: unchanged
    assert plain.attributes == {"traceparent": OTHER}
    assert trace_attributes(Options({"topic": "out"})) == {}
