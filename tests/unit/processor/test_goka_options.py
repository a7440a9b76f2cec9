"""goka's remaining options: iterator seek, restartable views, tester time, client ids, backoff."""

from __future__ import annotations

import asyncio
import datetime
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from broker.backends.inmem import InmemLog
from broker.backends.kafka.processor import (
    CallbackFailed,
    Context,
    Emitter,
    Processor,
    ProcessorOptions,
    ProcessorState,
    RestartBackoff,
    Tester,
    View,
    ViewIterator,
    ViewState,
    define_group,
    input,
    lmdb_storage,
    memory_storage,
    null_storage,
    output,
    persist,
)
from broker.backends.kafka.processor.processor import restartable_failure
from broker.backends.kafka.processor.storage import StorageBuilder
from broker.backoff import Backoff
from broker.errors import ClosedError, ConfigError, ConnectionFailed, PublishError, Timeout
from broker.log import Log, TopicPartition, with_client_id
from broker.testing import wait_until
from tests.unit.processor.support import (
    FlakyLog,
    as_log,
    committed_total,
    inmem_backend,
    murmur2,
    put,
    table_log,  # noqa: F401  (the ``log`` fixture)
)


# -- 1. iterator seek --------------------------------------------------------------------------
def _lmdb(tmp_path: Path) -> StorageBuilder:
    return lmdb_storage(tmp_path)


@pytest.mark.parametrize("kind", ["memory", "lmdb"])
async def test_a_view_iterator_seeks_to_the_first_key_at_or_after(
    log: InmemLog, tmp_path: Path, kind: str
) -> None:
    for i in range(0, 20, 2):  # k00, k02, ..., k18 spread over 3 partitions
        await put(log, f"k{i:02d}", str(i).encode())
    storage = memory_storage() if kind == "memory" else _lmdb(tmp_path)
    async with View(log, "table", "int64", storage=storage) as view:
        await view.wait_running(5)
        it = view.iterate()
        assert isinstance(it, ViewIterator)
        assert next(it) == ("k00", 0)
        assert it.seek("k07")  # absent: positioned at the next key
        assert next(it) == ("k08", 8)
        assert next(it) == ("k10", 10)
        assert it.seek("k02")  # backwards
        assert [k for k, _ in it][:3] == ["k02", "k04", "k06"]
        assert it.seek("k18") and list(it) == [("k18", 18)]
        assert not it.seek("k19") and list(it) == []
        # a ranged iterator stays inside its range
        ranged = view.iterate("k04", "k10")
        assert ranged.seek("a") and next(ranged) == ("k04", 4)
        assert not ranged.seek("k10")
        assert ranged.seek("k05") and list(ranged) == [("k06", 6), ("k08", 8)]
        prefixed = view.iterate(prefix="k1")
        assert prefixed.seek("k13") and [k for k, _ in prefixed] == ["k14", "k16", "k18"]
        # with buffered (not yet flushed) writes too
        view._tables[0].storage.set("k03", b"3")
        fresh = view.iterate()
        assert fresh.seek("k03") and next(fresh) == ("k03", 3)
        it.release()
        assert list(it) == []
        with pytest.raises(ClosedError):
            it.seek("k00")


async def test_a_view_iterator_over_null_storage_finds_nothing(log: InmemLog) -> None:
    await put(log, "a", b"1")
    async with View(log, "table", "int64", storage=null_storage()) as view:
        await view.wait_running(5)
        it = view.iterate()
        assert not it.seek("")
        assert list(it) == []


async def test_iterate_stays_a_plain_iterator(log: InmemLog) -> None:
    for key in ("b", "a", "c"):
        await put(log, key, b"1")
    async with View(log, "table", "int64") as view:
        await view.wait_running(5)
        assert dict(view.iterate()) == {"a": 1, "b": 1, "c": 1}
        assert [k for k, _ in view.iterate("b")] == ["b", "c"]
        assert "ViewIterator" in repr(view.iterate())


# -- 2. restartable views ----------------------------------------------------------------------
async def test_a_view_runs_once_by_default(log: InmemLog) -> None:
    view = View(log, "table", "int64")
    task = view.start()
    await view.wait_running(5)
    await view.stop()
    assert task.done()
    with pytest.raises(ClosedError, match="restartable"):
        await view.run()


async def test_a_restartable_view_runs_again_and_keeps_its_data_between_runs(log: InmemLog) -> None:
    await put(log, "a", b"1")
    states: list[ViewState] = []
    view = View(log, "table", "int64", restartable=True, on_state_change=states.append)
    first = view.start()
    await view.wait_running(5)
    assert view.get("a") == 1
    await view.stop()
    assert first.done() and view.state == ViewState.IDLE
    assert view.get("a") == 1 and dict(view.iterate()) == {"a": 1}  # still readable while stopped
    await put(log, "b", b"2")
    second = view.start()
    assert second is not first
    await view.wait_running(5)
    await wait_until(lambda: view.get("b") == 2, 5)
    # the second run caught up from the stores: it did not read "a" again
    assert sum(t.recovery.hwm - t.recovery.start_offset for t in view._tables) == 1
    await view.close()
    assert states.count(ViewState.RUNNING) == 2
    with pytest.raises(ClosedError):
        view.get("a")
    with pytest.raises(ClosedError, match="closed"):
        await view.run()


async def test_a_restartable_view_can_run_again_after_a_failure(log: InmemLog) -> None:
    await put(log, "a", b"1")
    flaky = FlakyLog(log)
    view = View(as_log(flaky), "table", "int64", restartable=True)
    async with view:
        await view.wait_running(5)
        await view.stop()
        flaky.broken_reads = 1  # the next recovery asks for watermarks and fails
        failed = view.start()
        with pytest.raises(ConnectionError):
            await failed
        assert view.get("a") == 1
        view.start()
        await view.wait_running(5)
        assert view.get("a") == 1


# -- 3. tester time ----------------------------------------------------------------------------
async def test_the_tester_sets_the_message_time() -> None:
    seen: list[float | None] = []

    def cb(ctx: Context, msg: Any) -> None:
        seen.append(ctx.timestamp)
        if msg == "again":
            ctx.emit("echo", ctx.key, "echoed")

    def echo(ctx: Context, msg: Any) -> None:
        seen.append(ctx.timestamp)

    now = [1000.0]
    async with Tester(clock=lambda: now[0]) as tester:
        await tester.processor(define_group("t", input("in", "str", cb), output("echo", "str")))
        await tester.processor(define_group("e", input("echo", "str", echo)))
        await tester.consume("in", "k", "x")
        await tester.consume("in", "k", "x", timestamp=5.0)
        moment = datetime.datetime(2026, 1, 2, 3, 4, 5, tzinfo=datetime.UTC)
        await tester.consume("in", "k", "x", timestamp=moment)
        now[0] = 2000.0
        await tester.consume("in", "k", "again")  # the emitted copy is stamped by the clock too
        await tester.consume_many("in", [("a", "x"), ("b", "x")], timestamp=7.0)
        assert seen == [1000.0, 5.0, moment.timestamp(), 2000.0, 2000.0, 7.0, 7.0]
        with pytest.raises(ConfigError, match="timezone"):
            await tester.consume("in", "k", "x", timestamp=datetime.datetime(2026, 1, 1))


async def test_without_a_clock_the_tester_keeps_the_logs_time_unless_told() -> None:
    seen: list[float | None] = []
    async with Tester() as tester:
        await tester.processor(
            define_group("t", input("in", "str", lambda ctx, m: seen.append(ctx.timestamp)))
        )
        await tester.consume("in", "k", "x")
        await tester.consume("in", "k", "x", timestamp=42)
    assert seen[0] is not None and seen[0] > 1_000_000_000
    assert seen[1] == 42.0


# -- 4. client ids -----------------------------------------------------------------------------
async def test_with_client_id_passes_the_id_to_every_client(log: InmemLog) -> None:
    flaky = FlakyLog(log)
    named = with_client_id(as_log(flaky), "svc-1")
    assert with_client_id(named, "svc-1") is named
    assert with_client_id(as_log(flaky), None) is flaky
    assert isinstance(named, Log) and "svc-1" in repr(named)
    tp, _ = await named.produce("table", b"1", key="a", partition=0)
    assert tp == TopicPartition("table", 0)
    reader = named.reader()
    await reader.close()
    consumer = named.consumer("g", ["table"])
    await consumer.close()
    assert flaky.client_ids == [("send:table", "svc-1"), ("reader", "svc-1"), ("consumer:g", "svc-1")]
    renamed = with_client_id(named, "svc-2")
    assert renamed is not named
    await renamed.close()  # a no-op: the wrapped log stays open
    assert await named.partitions("table") == 3
    with pytest.raises(ConfigError):
        with_client_id(as_log(flaky), "")


async def test_the_in_memory_log_ignores_client_ids(log: InmemLog) -> None:
    await log.produce("table", b"1", key="a", client_id="x")
    reader = log.reader(client_id="x")
    reader.assign({TopicPartition("table", murmur2(b"a", 3)): 0})
    assert len(await reader.poll(10, 1)) == 1
    await reader.close()
    consumer = log.consumer("g", ["table"], client_id="x")
    await consumer.close()


async def test_processors_and_views_report_their_client_id(log: InmemLog) -> None:
    flaky = FlakyLog(log)
    await flaky.create_topic("in", 1)
    await flaky.produce("in", b"x", key="k", partition=0)
    graph = define_group("cid", input("in", "str", lambda ctx, m: ctx.set_value(m)), persist("str"))
    async with Processor(as_log(flaky), graph, client_id="proc-1") as proc:
        await wait_until(lambda: proc.get("k") == "x", 5)
    names = {who: cid for who, cid in flaky.client_ids}
    assert names["consumer:cid"] == "proc-1" and names["send:cid-table"] == "proc-1"
    flaky.client_ids.clear()
    async with View(as_log(flaky), "table", "int64", client_id="view-1") as view:
        await view.wait_running(5)
    assert flaky.client_ids and {cid for _, cid in flaky.client_ids} == {"view-1"}
    flaky.client_ids.clear()
    async with Emitter(as_log(flaky), "in", "str", client_id="emitter-1") as emitter:
        await emitter.emit_sync("k", "y")
    assert flaky.client_ids and {cid for _, cid in flaky.client_ids} == {"emitter-1"}
    with pytest.raises(ConfigError):
        Processor(as_log(flaky), graph, client_id="")


def test_the_kafka_log_sets_client_id(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("confluent_kafka")
    from broker.backends.kafka import log as kafka_log
    from broker.backends.kafka.settings import KafkaSettings

    configs: list[tuple[str, dict[str, Any]]] = []

    class Recorder:
        def __init__(self, kind: str) -> None:
            self.kind = kind

        def __call__(self, config: dict[str, Any], *args: Any, **kwargs: Any) -> Any:
            configs.append((self.kind, config))
            return object()

    monkeypatch.setattr(kafka_log, "GroupCore", Recorder("consumer"))
    monkeypatch.setattr(kafka_log, "ReaderCore", Recorder("reader"))
    monkeypatch.setattr(kafka_log, "AsyncProducer", Recorder("producer"))
    klog = kafka_log.KafkaLog(KafkaSettings(bootstrap_servers=("127.0.0.1:1",)), admin=object())  # type: ignore[arg-type]
    klog.consumer("g", ["t"], client_id="proc-1")
    klog.consumer("g", ["t"])
    klog.reader(client_id="view-1")
    klog._producer_for("emitter-1")
    assert klog._producer_for("emitter-1") is klog._producer_for("emitter-1")
    klog._producer_for(None)
    got = [(kind, config["client.id"]) for kind, config in configs]
    assert got == [
        ("consumer", "proc-1"),
        ("consumer", "polybroker"),
        ("reader", "view-1"),
        ("producer", "emitter-1"),
        ("producer", "polybroker"),
    ]


# -- 5. restart with backoff -------------------------------------------------------------------
def test_restart_backoff_grows_and_resets_after_a_long_run() -> None:
    backoff = RestartBackoff(Backoff(initial=1.0, multiplier=2.0, maximum=5.0), reset_after=60.0)
    assert [backoff.next_delay(1.0) for _ in range(4)] == [1.0, 2.0, 4.0, 5.0]
    assert backoff.next_delay(61.0) == 1.0 and backoff.attempt == 1

    class Fixed:
        def delay(self, attempt: int) -> float:
            return 0.25 * attempt

    custom = RestartBackoff(Fixed(), reset_after=0.0)  # every run "long": always the first delay
    assert custom.next_delay(0.0) == 0.25 and custom.next_delay(0.0) == 0.25


def test_which_failures_restart() -> None:
    assert restartable_failure(ConnectionFailed("down"))
    assert restartable_failure(PublishError("send failed"))
    assert restartable_failure(Timeout("slow"))
    assert restartable_failure(ConnectionError("reset"))
    assert not restartable_failure(CallbackFailed("user bug"))
    assert not restartable_failure(ConfigError("bad"))
    assert not restartable_failure(ValueError("bug"))


def test_backoff_options_are_checked() -> None:
    with pytest.raises(ConfigError, match="backoff"):
        ProcessorOptions(backoff=(1, 2))  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="backoff_reset"):
        ProcessorOptions(backoff_reset=-1)
    assert ProcessorOptions(auto_reconnect=True).backoff.delay(1) == 0.5


@pytest.fixture
async def flaky() -> AsyncIterator[FlakyLog]:
    backend = inmem_backend()
    async with backend:
        log = FlakyLog(backend.log())
        await log.create_topic("in", 1)
        yield log


def relay(seen: list[str]) -> Callable[[Context, str], None]:
    def cb(ctx: Context, msg: str) -> None:
        seen.append(msg)
        ctx.emit("out", ctx.key, msg)

    return cb


async def test_auto_reconnect_restarts_after_a_broker_failure(flaky: FlakyLog) -> None:
    seen: list[str] = []
    graph = define_group("r", input("in", "str", relay(seen)), output("out", "str"))
    flaky.fail_topics = {"out"}
    for i in range(5):
        await flaky.produce("in", str(i).encode(), key="k", partition=0)
    proc = Processor(
        as_log(flaky), graph, auto_reconnect=True, backoff=Backoff(0.01, 2.0, 0.05), create_partitions=1
    )
    task = proc.start()
    await wait_until(lambda: proc.restarts >= 2, 5)
    assert not task.done()
    assert await committed_total(as_log(flaky), "r", "in", 1) == 0  # failed runs commit nothing
    flaky.fail_topics = set()
    async with asyncio.timeout(5):
        while await committed_total(as_log(flaky), "r", "in", 1) < 5:  # noqa: ASYNC110
            await asyncio.sleep(0.01)
    await proc.stop()
    await task  # a clean stop after restarts returns normally
    assert proc.state == ProcessorState.STOPPED and proc.error is None
    assert await committed_total(as_log(flaky), "r", "in", 1) == 5
    assert set(seen) == {str(i) for i in range(5)}


async def test_auto_reconnect_retries_recovery_that_cannot_reach_the_broker(flaky: FlakyLog) -> None:
    graph = define_group("t", input("in", "str", lambda ctx, m: ctx.set_value(m)), persist("str"))
    await flaky.produce("in", b"v", key="k", partition=0)
    flaky.broken_reads = 2  # the table recovery's watermark requests fail twice
    proc = Processor(as_log(flaky), graph, auto_reconnect=True, backoff=Backoff(0.01, 2.0, 0.02))
    async with proc:
        await wait_until(lambda: proc.get("k") == "v", 5)
    assert proc.restarts >= 1 and proc.error is None


async def test_a_callback_failure_is_never_restarted(flaky: FlakyLog) -> None:
    def boom(ctx: Context, msg: str) -> None:
        raise RuntimeError("user bug")

    await flaky.produce("in", b"x", key="k", partition=0)
    proc = Processor(as_log(flaky), define_group("b", input("in", "str", boom)), auto_reconnect=True)
    with pytest.raises(CallbackFailed):
        await proc.run()
    assert proc.restarts == 0 and proc.state == ProcessorState.FAILED


async def test_stop_during_the_backoff_wait_is_a_clean_stop(flaky: FlakyLog) -> None:
    graph = define_group("s", input("in", "str", relay([])), output("out", "str"))
    flaky.fail_topics = {"out"}
    await flaky.produce("in", b"x", key="k", partition=0)
    proc = Processor(
        as_log(flaky), graph, auto_reconnect=True, backoff=Backoff(30.0, 2.0, 30.0), create_partitions=1
    )
    task = proc.start()
    await wait_until(lambda: proc.state == ProcessorState.FAILED, 5)  # torn down, now waiting 30 s
    await asyncio.wait_for(proc.stop(), 2)
    await task
    assert proc.state == ProcessorState.STOPPED and proc.error is None and proc.restarts == 0


async def test_a_view_takes_a_backoff_policy(log: InmemLog) -> None:
    await put(log, "a", b"1")
    flaky = FlakyLog(log)
    flaky.broken_reads = 3
    asked: list[int] = []

    class Policy:
        def delay(self, attempt: int) -> float:
            asked.append(attempt)
            return 0.001

    async with View(as_log(flaky), "table", "int64", auto_reconnect=True, backoff=Policy()) as view:
        await view.wait_running(5)
        assert view.get("a") == 1
    assert asked[:3] == [1, 2, 3]
    assert View(log, "table", "int64", backoff=(0.1, 0.4)).backoff.delay(5) == 0.4
