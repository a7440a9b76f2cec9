"""The backlog extra on inmem, the ``polybroker.consumer.backlog`` gauge and the ``lagging`` health."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Callable

import pytest

import broker
from broker.backend import Backlog
from broker.backends.inmem.backend import InmemBackend
from broker.backends.inmem.settings import InmemSettings
from broker.driver.testing.harness import wait_until
from broker.errors import ConnectionFailed, UnknownTopic
from broker.message import OutboundMessage
from broker.telemetry import InstrumentedBackend, PrometheusMetrics, instrument
from tests.unit.telemetry.conftest import Otel

GAUGE = "polybroker.consumer.backlog"


def _numbered(count: int) -> list[OutboundMessage]:
    return [OutboundMessage(str(i).encode(), key=f"k{i % 3}") for i in range(count)]


def _inmem() -> InmemBackend:
    return InmemBackend(InmemSettings(name=f"backlog-{uuid.uuid4().hex}", partitions=3))


async def _eventually(condition: Callable[[], bool], timeout: float = 5.0) -> None:
    await wait_until(condition, timeout, 0.01)


# -- the extra on inmem ---------------------------------------------------------------------
async def test_inmem_counts_undelivered_redelivered_and_in_flight() -> None:
    async with _inmem() as backend:
        assert isinstance(backend, Backlog)
        assert backend.backlog_counts_in_flight
        async with backend.messages("jobs", "workers") as consumer:
            await backend.publisher().topic("jobs").batch_publish(*_numbered(6))
            assert await backend.backlog("jobs", "workers") == 6
            first = await consumer.next_message(timeout=1)
            second = await consumer.next_message(timeout=1)
            assert await backend.backlog("jobs", "workers") == 6, "in flight is still backlog"
            await first.ack()
            assert await backend.backlog("jobs", "workers") == 5
            await second.nack()
            assert await backend.backlog("jobs", "workers") == 5, "a nacked message comes back"
        assert await backend.backlog("jobs", "workers") == 5, "a closed consumer's subscription stays"


async def test_inmem_counts_a_groups_records_after_its_commits() -> None:
    async with _inmem() as backend:
        await backend.publisher().topic("log").batch_publish(*_numbered(9))
        async with backend.records("log", "readers") as records:
            assert await backend.backlog("log", "readers") == 9
            taken = [await records.next_record(timeout=1) for _ in range(4)]
            assert await backend.backlog("log", "readers") == 9, "read but not committed"
            for record in taken:
                await record.ack()
            assert await backend.backlog("log", "readers") == 5


async def test_inmem_unknown_names_raise_unknown_topic() -> None:
    async with _inmem() as backend:
        with pytest.raises(UnknownTopic):
            await backend.backlog("nowhere", "workers")
        await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
        with pytest.raises(UnknownTopic):
            await backend.backlog("jobs", "nobody")


async def test_the_base_default_is_none() -> None:
    from broker.driver.base import BackendBase

    base = BackendBase()
    assert await base.backlog("t", "s") is None
    await base.close()


# -- the gauge and the health --------------------------------------------------------------
async def test_gauge_and_health_follow_the_backlog(backend: InstrumentedBackend, otel: Otel) -> None:
    backend.backlog_interval = 0.05
    backend.lag_threshold = 3
    async with backend.messages("jobs", "workers") as consumer:
        await backend.publisher().topic("jobs").batch_publish(*_numbered(5))
        first = await consumer.next_message(timeout=1)
        await _eventually(lambda: backend.health().consumers[0].backlog == 5)
        report = backend.health()
        assert report.lagging and report.ready
        assert report.consumers[0].lagging
        assert report.as_dict()["lagging"] is True
        assert otel.value(GAUGE, subscription="workers", destination="jobs", system="inmem") == 5
        await first.ack()
        for _ in range(2):
            await (await consumer.next_message(timeout=1)).ack()
        await _eventually(lambda: backend.health().consumers[0].backlog == 2)
        report = backend.health()
        assert not report.lagging and not report.consumers[0].lagging and report.ready
        assert otel.value(GAUGE, subscription="workers") == 2
    assert otel.value(GAUGE, subscription="workers") is None, "the series goes with the last consumer"
    assert backend._watches[("jobs", "workers")]._task is None


async def test_one_poll_per_subscription_whatever_the_consumers() -> None:
    calls: list[tuple[str, str]] = []

    class Counting(InmemBackend):
        async def backlog(self, topic: str, subscription: str) -> int | None:
            calls.append((topic, subscription))
            return await super().backlog(topic, subscription)

    plain = Counting(InmemSettings(name=f"backlog-{uuid.uuid4().hex}"))
    async with instrument(plain, opentelemetry=False) as backend:
        backend.backlog_interval = 0.1
        async with backend.messages("jobs", "workers") as a, backend.messages("jobs", "workers") as b:
            for consumer in (a, b):
                with pytest.raises(TimeoutError):
                    await consumer.next_message(timeout=0.01)
            await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
            await asyncio.sleep(0.55)
            assert 3 <= len(calls) <= 6, calls  # about every 0.1 s for the one subscription
            assert all(h.backlog == 1 for h in backend.health().consumers)
        settled = len(calls)
        await asyncio.sleep(0.3)
        assert len(calls) == settled, "polling stops when the last consumer closes"


async def test_receiver_is_watched_while_it_receives(backend: InstrumentedBackend, otel: Otel) -> None:
    backend.backlog_interval = 0.05
    backend.lag_threshold = 0
    release = asyncio.Event()
    seen = asyncio.Event()

    async def handler(message: broker.Message) -> None:
        seen.set()
        await release.wait()
        await message.ack()

    receiver = backend.receiver("jobs", "handlers")
    await backend.publisher().topic("jobs").batch_publish(*_numbered(3))
    task = asyncio.create_task(receiver.receive(handler))
    await asyncio.wait_for(seen.wait(), 5)
    await _eventually(lambda: backend.health().consumers[0].backlog == 3)
    assert backend.health().lagging
    release.set()
    await _eventually(lambda: backend.health().consumers[0].backlog == 0)
    assert not backend.health().lagging
    task.cancel()
    await asyncio.gather(task, return_exceptions=True)
    assert otel.value(GAUGE, subscription="handlers") is None


async def test_records_are_watched_by_group(backend: InstrumentedBackend, otel: Otel) -> None:
    backend.backlog_interval = 0.05
    await backend.publisher().topic("log").batch_publish(*_numbered(4))
    async with backend.records("log", "readers") as records:
        record = await records.next_record(timeout=1)
        await record.ack()
        await _eventually(lambda: otel.value(GAUGE, subscription="readers") is not None)
        assert 0 <= otel.value(GAUGE, subscription="readers", destination="log") <= 3
        assert backend.health().consumers[0].backlog == otel.value(GAUGE, subscription="readers")


async def test_a_failing_poll_is_counted_never_raised_and_keeps_ready(
    caplog: pytest.LogCaptureFixture,
) -> None:
    class Failing(InmemBackend):
        async def backlog(self, topic: str, subscription: str) -> int | None:
            raise ConnectionFailed("the monitoring endpoint is down")

    plain = Failing(InmemSettings(name=f"backlog-{uuid.uuid4().hex}"))
    async with instrument(plain, opentelemetry=False) as backend:
        backend.backlog_interval = 0.02
        async with backend.messages("jobs", "workers") as consumer:
            await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
            message = await consumer.next_message(timeout=1)
            await message.ack()
            await _eventually(lambda: backend.health().consumers[0].backlog_errors >= 3)
            report = backend.health()
            entry = report.consumers[0]
            assert report.ready and entry.healthy and not report.lagging
            assert entry.backlog is None
            assert entry.backlog_error == "ConnectionFailed: the monitoring endpoint is down"
    warnings = [r for r in caplog.records if "backlog" in r.getMessage() and r.levelname == "WARNING"]
    assert len(warnings) == 1, "one warning, then debug lines until a poll works again"


async def test_a_backend_that_does_not_say_is_polled_once() -> None:
    calls: list[str] = []

    class Silent(InmemBackend):
        async def backlog(self, topic: str, subscription: str) -> int | None:
            calls.append(topic)
            return None

    prometheus = PrometheusMetrics()
    plain = Silent(InmemSettings(name=f"backlog-{uuid.uuid4().hex}"))
    async with instrument(plain, opentelemetry=False, prometheus=prometheus) as backend:
        backend.backlog_interval = 0.02
        async with backend.messages("jobs", "workers") as consumer:
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=0.2)
            assert calls == ["jobs"]
            assert backend.health().consumers[0].backlog is None
            assert "polybroker_consumer_backlog{" not in prometheus.exposition().decode()


async def test_prometheus_gauge_is_set_and_withdrawn() -> None:
    prometheus = PrometheusMetrics()
    plain = _inmem()
    async with instrument(plain, opentelemetry=False, prometheus=prometheus) as backend:
        backend.backlog_interval = 0.05
        async with backend.messages("jobs", "workers") as consumer:
            await backend.publisher().topic("jobs").batch_publish(*_numbered(7))
            await (await consumer.next_message(timeout=1)).ack()
            line = 'polybroker_consumer_backlog{destination="jobs",subscription="workers",system="inmem"} 6.0'
            await _eventually(lambda: line in prometheus.exposition().decode())
        text = prometheus.exposition().decode()
        assert "# TYPE polybroker_consumer_backlog gauge" in text
        assert "polybroker_consumer_backlog{" not in text


async def test_no_polling_when_the_interval_is_off(backend: InstrumentedBackend, otel: Otel) -> None:
    backend.backlog_interval = 0
    async with backend.messages("jobs", "workers") as consumer:
        await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
        await (await consumer.next_message(timeout=1)).ack()
        await asyncio.sleep(0.1)
        assert backend.health().consumers[0].backlog is None
    assert not backend._watches
    assert await backend.backlog("jobs", "workers") == 0, "asking directly still works"


async def test_backend_close_stops_the_polling(otel: Otel) -> None:
    plain = _inmem()
    backend = instrument(plain, tracer_provider=otel.tracer_provider, meter_provider=otel.meter_provider)
    backend.backlog_interval = 0.02
    consumer = backend.messages("jobs", "workers")
    await backend.publisher().topic("jobs").publish(OutboundMessage(b"x"))
    await consumer.next_message(timeout=1)
    watch = backend._watches[("jobs", "workers")]
    await _eventually(lambda: backend.health().consumers[0].backlog == 1)
    await backend.close()
    assert watch._task is None
    assert otel.value(GAUGE, subscription="workers") is None
