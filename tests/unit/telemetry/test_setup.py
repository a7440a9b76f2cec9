"""instrument() without the optional packages, health, and the publish middleware hook."""

from __future__ import annotations

import sys
import uuid
from collections.abc import Sequence

import pytest

import broker
from broker import OutboundMessage
from broker.driver.publishing import DriverPublisher, Send
from broker.errors import ClosedError, ConnectionFailed, MissingDependency
from broker.telemetry import PrometheusMetrics, instrument
from tests.unit.telemetry.conftest import Otel

OTEL_MODULES = (
    "opentelemetry",
    "opentelemetry.trace",
    "opentelemetry.metrics",
    "opentelemetry.context",
    "opentelemetry.propagate",
)


def test_instrument_without_opentelemetry_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in OTEL_MODULES:
        monkeypatch.setitem(sys.modules, name, None)  # an import of it now fails
    backend = broker.connect(f"inmem://no-otel-{uuid.uuid4().hex}")
    with pytest.raises(MissingDependency) as caught:
        instrument(backend)
    assert caught.value.extra == "otel" and "polybroker[otel]" in str(caught.value)
    # what needs no OpenTelemetry still works
    assert instrument(backend, opentelemetry=False).name == "inmem"


def test_prometheus_without_prometheus_client_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)
    with pytest.raises(MissingDependency) as caught:
        PrometheusMetrics()
    assert caught.value.extra == "prometheus"


def test_importing_broker_telemetry_imports_neither_package() -> None:
    import subprocess

    code = (
        "import sys, broker, broker.telemetry;"
        "print(sorted(m for m in sys.modules if m.startswith(('opentelemetry', 'prometheus_client'))))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


async def test_health_follows_consumers(otel: Otel) -> None:
    plain = broker.connect(f"inmem://health-{uuid.uuid4().hex}")
    backend = instrument(plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    report = backend.health()
    assert report.live and report.ready and report.consumers == ()
    iterator = backend.messages("jobs", "workers")
    (entry,) = backend.health().consumers
    assert (entry.connected, entry.consuming, entry.received) == (None, False, 0)
    await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
    before = entry.idle_since
    message = await iterator.next_message(timeout=5)
    await message.ack()
    (entry,) = backend.health().consumers
    assert entry.connected is True and entry.consuming and entry.received == 1
    assert entry.idle_since >= before and entry.last_error is None
    assert backend.health().as_dict()["consumers"][0]["destination"] == "jobs"
    await iterator.close()
    assert backend.health().consumers == ()
    await backend.close()
    assert not backend.health().live and not backend.health().ready


async def test_health_does_not_count_a_closed_consumer_as_a_failure(otel: Otel) -> None:
    plain = broker.connect(f"inmem://health-{uuid.uuid4().hex}")
    backend = instrument(plain, opentelemetry=False)
    iterator = backend.messages("jobs", "workers")
    await iterator.wrapped.close()  # closed underneath the wrapper: the next pull fails
    with pytest.raises(ClosedError):
        await iterator.next_message(timeout=1)
    (entry,) = backend.health().consumers
    assert entry.connected is True  # a closed consumer is not a broken connection
    await backend.close()


async def test_send_middleware_wraps_the_driver_send_in_order() -> None:
    backend = broker.connect(f"inmem://mw-{uuid.uuid4().hex}")
    async with backend:
        publisher = backend.publisher()
        assert isinstance(publisher, DriverPublisher)
        assert publisher.middleware == []
        events: list[str] = []

        def middleware(name: str):  # type: ignore[no-untyped-def]
            async def around(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
                events.append(f"{name} before {topic} {len(messages)}")
                await send([OutboundMessage(m.data, m.key, {**m.attributes, name: "1"}) for m in messages])
                events.append(f"{name} after")

            return around

        publisher.wrap_send(middleware("outer"))
        publisher.wrap_send(middleware("inner"))
        await publisher.topic("t").publish(OutboundMessage(b"a"))
        assert events == ["outer before t 1", "inner before t 1", "inner after", "outer after"]
        async with backend.messages("t", "s") as it:
            message = await it.next_message(timeout=5)
        assert dict(message.attributes) == {"outer": "1", "inner": "1"}


class _Unreachable:
    """A message source whose broker connection is gone (what a backend raises then)."""

    async def next_message(self, timeout: float | None = None) -> broker.Message:
        raise ConnectionFailed("connection refused")

    async def close(self) -> None:
        pass


async def test_health_records_a_broker_failure_and_recovers(otel: Otel) -> None:
    from broker.telemetry.wrappers import TracedIterator

    backend = instrument(broker.connect(f"inmem://health-{uuid.uuid4().hex}"), opentelemetry=False)
    failing = TracedIterator(_Unreachable(), backend.telemetry.consumer("jobs", "workers", "messages"))
    with pytest.raises(ConnectionFailed):
        await failing.next_message(timeout=1)
    report = backend.health()
    assert report.live and not report.ready
    (entry,) = report.consumers
    assert entry.connected is False and entry.last_error == "ConnectionFailed: connection refused"
    await failing.close()
    assert backend.health().ready
    await backend.close()


async def test_check_health_pings_the_broker_for_readiness(otel: Otel) -> None:
    """A readiness endpoint's ``check_health()`` pings the broker: a reachable one is ready; one at a
    wrong host is live but not ready, with the ping's error in the report (and ``ping()`` raises it)."""
    from broker.driver.testing.ping import unreachable

    reachable = instrument(broker.connect(f"inmem://ping-{uuid.uuid4().hex}"), opentelemetry=False)
    report = await reachable.check_health(timeout=5)
    assert report.live and report.ready and report.reachable is True
    wrong = unreachable("rabbitmq://127.0.0.1:5672/")
    assert wrong is not None
    backend = instrument(broker.connect(wrong), opentelemetry=False)
    report = await backend.check_health(timeout=5)
    assert report.live and not report.ready and report.reachable is False
    assert report.as_dict()["reachable"] is False
    assert report.ping_error is not None and report.ping_error.startswith("ConnectionFailed: ")
    with pytest.raises(ConnectionFailed):
        await backend.ping(timeout=5)
    await backend.close()
    await reachable.close()
