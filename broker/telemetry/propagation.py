"""Trace context in message attributes, for code that does not publish through an instrumented backend.

:func:`instrument` injects the publish span's context into every message it sends and extracts
it from every message it receives. Code that writes or reads messages some other way (the stream
processor, the Kafka marker queue's tracker, a Spark job, a hand-written bridge) uses these two
functions to carry the same W3C trace context (``traceparent``, ``tracestate``, and ``baggage``
with the default propagator) in portable ``str -> str`` attributes:

>>> from broker.telemetry.propagation import extract, inject
>>> attributes = inject({"tenant": "acme"})        # the current context added   # doctest: +SKIP
>>> parent = extract(received.attributes)          # a context to start a span in  # doctest: +SKIP

Both use the propagator given, else OpenTelemetry's global one (W3C trace context and baggage
unless configured otherwise). OpenTelemetry is imported on the first call, not before: importing
this module costs nothing, and a missing API raises :class:`~broker.errors.MissingDependency`
naming the ``otel`` extra.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.telemetry._deps import otel as _otel

__all__ = ["TRACE_HEADERS", "extract", "inject"]

#: The attributes the default (W3C trace context and baggage) propagator reads and writes.
TRACE_HEADERS: tuple[str, ...] = ("traceparent", "tracestate", "baggage")


def inject(
    attributes: Mapping[str, str] | None = None, context: Any = None, *, propagator: Any = None
) -> dict[str, str]:
    """A copy of ``attributes`` with ``context``'s trace context added (default: the current context).

    ``context``: an OpenTelemetry ``Context`` (for example ``trace.set_span_in_context(span)``);
    ``None`` is the current one. ``propagator``: a ``TextMapPropagator`` (default: the global one).
    Entries the propagator writes replace those of the same name in ``attributes``; with no valid
    span in the context, the copy is returned unchanged. ``attributes`` itself is never modified.
    """
    carrier: dict[str, str] = dict(attributes) if attributes else {}
    otel = _otel()
    if propagator is None:
        otel.propagate.inject(carrier, context=context)
    else:
        propagator.inject(carrier, context=context)
    return carrier


def extract(attributes: Mapping[str, str] | None, *, context: Any = None, propagator: Any = None) -> Any:
    """The OpenTelemetry ``Context`` carried by ``attributes`` (a message's or a record's).

    Start a span with ``context=extract(message.attributes)`` to make it a child of the span that
    published the message. Attributes with no trace context give ``context`` (default: an empty
    context, so the span starts a new trace). ``propagator``: as in :func:`inject`.
    """
    otel = _otel()
    carrier = attributes if attributes else {}
    if propagator is None:
        return otel.propagate.extract(carrier, context=context)
    return propagator.extract(carrier, context=context)
