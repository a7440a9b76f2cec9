"""Per-instance loggers (goka's WithLogger, WithViewLogger, WithEmitterLogger; issue 34, point 5)."""

from __future__ import annotations

import logging
import uuid

import pytest

import broker
from broker.backends.kafka.processor import (
    Context,
    Emitter,
    Processor,
    ProcessorOptions,
    View,
    define_group,
    input,
    persist,
)
from broker.errors import ConfigError
from broker.testing import wait_until

MODULE = "broker.backends.kafka.processor"


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def names(caplog: pytest.LogCaptureFixture) -> set[str]:
    return {r.name for r in caplog.records if r.levelno >= logging.INFO}


async def test_processor_view_and_emitter_log_to_their_own_loggers(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO)
    async with broker.connect(f"inmem://loggers-{uuid.uuid4().hex}?partitions=2") as backend:
        log = backend.log()
        graph = define_group("logged", input("clicks", "str", count), persist("int64"))
        async with Emitter(
            log, "clicks", "str", create_partitions=2, logger=logging.getLogger("app.emitter")
        ) as e:
            e.emit("alice", "x")
        assert names(caplog) == {"app.emitter"}  # "creating topic 'clicks'"
        async with Processor(log, graph, logger=logging.getLogger("app.proc")) as first:
            await wait_until(lambda: first.get("alice") == 1, 5)
        caplog.clear()
        # A restart reads the table back from memory storage: the processor warns, on its logger.
        async with Processor(log, graph, logger=logging.getLogger("app.proc")) as again:
            assert again.get("alice") == 1
        assert "app.proc" in names(caplog) and MODULE not in names(caplog)
        caplog.clear()
        async with View(log, graph.table_topic, "int64", logger=logging.getLogger("app.view")) as view:
            await view.wait_running(5)
            assert view.get("alice") == 1
        assert names(caplog) == {"app.view"}
        caplog.clear()
        # The default stays the module logger.
        async with View(log, graph.table_topic, "int64") as view:
            await view.wait_running(5)
        assert names(caplog) == {MODULE}


def test_a_logger_must_be_a_logger() -> None:
    log = broker.connect("inmem://loggers-bad").log()
    with pytest.raises(ConfigError):
        ProcessorOptions(logger="app")  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        View(log, "t", "str", logger=print)  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        Emitter(log, "t", "str", logger=42)  # type: ignore[arg-type]
    Processor(log, define_group("g", input("i", "str", count)), logger=logging.getLogger("x"))
