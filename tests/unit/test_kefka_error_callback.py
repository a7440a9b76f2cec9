"""kefka's ErrorCallback semantics on the helpers' Consumer and Reader (issue 34, point 4).

Transient polling and reading errors reach the callback and the helper keeps going; a fatal
librdkafka error is reported, then ends ``run()`` / ``read()``. No broker is needed: an
unreachable bootstrap address makes librdkafka report transient connection errors itself.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.backends.kafka.client import Consumer, Reader
from broker.backends.kafka.errors import translate
from broker.errors import ConnectionFailed, ReceiveError, UnknownTopic
from broker.testing import wait_until

confluent_kafka = pytest.importorskip("confluent_kafka")
KafkaError = confluent_kafka.KafkaError

UNREACHABLE = {"bootstrap.servers": "127.0.0.1:1", "reconnect.backoff.max.ms": 100}


def nothing(message: Any, commit: Any) -> None:
    """A handler that is never called here."""


async def test_the_consumer_reports_transient_errors_and_keeps_consuming() -> None:
    errors: list[BaseException] = []
    consumer = Consumer(
        {**UNREACHABLE, "group.id": "g"}, nothing, "t", poll_timeout=0.1, error_callback=errors.append
    )
    task = consumer.start()
    try:
        await wait_until(lambda: any(isinstance(e, ConnectionFailed) for e in errors), 10)
        assert not task.done()  # still consuming
        # An error event in the fetched stream reaches the callback as a typed error too.
        assert consumer.core.transient is not None  # type: ignore[attr-defined]
        consumer.core.transient.on_event("t", KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))  # type: ignore[attr-defined]
        assert isinstance(errors[-1], UnknownTopic)
        consumer.core.transient.on_event("t", KafkaError(KafkaError._PARTITION_EOF))  # type: ignore[attr-defined]
        assert isinstance(errors[-1], UnknownTopic)  # EOF is no error
    finally:
        await consumer.close()
    await asyncio.wait_for(task, 5)


async def test_a_failed_fetch_is_reported_and_consuming_goes_on_unless_fatal(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    errors: list[BaseException] = []
    consumer = Consumer(
        {**UNREACHABLE, "group.id": "g"}, nothing, "t", poll_timeout=0.05, error_callback=errors.append
    )
    failures = [
        translate(KafkaError(KafkaError._TRANSPORT), "consuming failed", ReceiveError),
        translate(KafkaError(KafkaError._FATAL, fatal=True), "consuming failed", ReceiveError),
    ]
    calls = 0

    async def fetch(count: int, timeout: float | None) -> list[Any]:
        nonlocal calls
        calls += 1
        if failures:
            raise failures.pop(0)
        return []

    monkeypatch.setattr(consumer.core, "fetch", fetch)
    try:
        with pytest.raises(ReceiveError, match="_FATAL"):
            await asyncio.wait_for(consumer.run(), 10)
        assert calls == 2  # the transient failure did not end run()
        assert [type(e) for e in errors if "consuming failed" in str(e)] == [ConnectionFailed, ReceiveError]
    finally:
        await consumer.close()


async def test_the_reader_reports_transient_errors_and_keeps_reading(monkeypatch: pytest.MonkeyPatch) -> None:
    errors: list[BaseException] = []
    reader = Reader(
        UNREACHABLE,
        nothing,
        {("t", 0): 0},
        poll_timeout=0.05,
        error_callback=errors.append,
        close_timeout=0.3,
    )
    task = asyncio.ensure_future(reader.read())
    try:
        await wait_until(lambda: any(isinstance(e, ConnectionFailed) for e in errors), 10)
        assert not task.done()
        fatal = translate(KafkaError(KafkaError._FATAL, fatal=True), "reading failed", ReceiveError)

        async def fetch(count: int, timeout: float | None) -> list[Any]:
            raise fatal

        monkeypatch.setattr(reader.core, "fetch", fetch)
        with pytest.raises(ReceiveError):
            await asyncio.wait_for(task, 10)
        assert errors[-1] is fatal
    finally:
        await reader.close()
