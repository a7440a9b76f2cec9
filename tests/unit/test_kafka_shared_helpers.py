"""Helpers the Kafka package shares: settling futures once, making SDK clients, ``Log.produce``."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Mapping

import pytest

from broker.backends.kafka.threads import reject, resolve, sdk_client
from broker.errors import ConfigError
from broker.log import Log, TopicPartition, with_client_id
from broker.log_base import LogBase


async def test_resolve_and_reject_settle_a_pending_future() -> None:
    loop = asyncio.get_running_loop()
    done: asyncio.Future[int] = loop.create_future()
    resolve(done, 7)
    assert done.result() == 7
    failed: asyncio.Future[int] = loop.create_future()
    reject(failed, KeyError("x"))
    with pytest.raises(KeyError):
        failed.result()


async def test_resolve_and_reject_leave_a_settled_future_alone() -> None:
    loop = asyncio.get_running_loop()
    cancelled: asyncio.Future[int] = loop.create_future()
    cancelled.cancel()
    resolve(cancelled, 1)  # the waiter gave up: no InvalidStateError
    reject(cancelled, KeyError("x"))
    assert cancelled.cancelled()
    first: asyncio.Future[int] = loop.create_future()
    resolve(first, 1)
    resolve(first, 2)
    reject(first, KeyError("x"))
    assert first.result() == 1


async def test_resolve_from_another_thread_through_the_loop() -> None:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[str] = loop.create_future()
    await asyncio.to_thread(loop.call_soon_threadsafe, resolve, future, "there")
    assert await asyncio.wait_for(future, 2) == "there"


@pytest.mark.parametrize("kind", ["Consumer", "Producer"])
def test_sdk_client_translates_a_refused_configuration(kind: str) -> None:
    pytest.importorskip("confluent_kafka")
    config = {"bootstrap.servers": "127.0.0.1:1", "group.id": "g", "no.such.setting": "x"}
    with pytest.raises(ConfigError, match=f"cannot create a Kafka {kind.lower()}") as caught:
        sdk_client(kind, config)  # type: ignore[arg-type]
    assert type(caught.value.__cause__).__name__ == "KafkaException"


class _Sent(LogBase):
    """A log that records what ``send`` was asked (everything else is unused here)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, bytes | None, str | None, str | None]] = []

    def send(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> Awaitable[tuple[TopicPartition, int]]:
        self._check()
        self.sent.append((topic, value, key, client_id))
        future: asyncio.Future[tuple[TopicPartition, int]] = asyncio.get_running_loop().create_future()
        future.set_result((TopicPartition(topic, partition or 0), len(self.sent) - 1))
        return future


async def test_a_log_deriving_from_the_port_produces_by_awaiting_send() -> None:
    log = _Sent()
    assert isinstance(log, Log)
    assert await log.produce("t", b"v", key="k", partition=1) == (TopicPartition("t", 1), 0)
    assert log.sent == [("t", b"v", "k", None)]


async def test_produce_through_a_client_id_sends_with_that_id() -> None:
    log = _Sent()
    named = with_client_id(log, "svc")
    assert await named.produce("t", b"v", key="k") == (TopicPartition("t", 0), 0)
    assert await named.produce("t", None, client_id="other") == (TopicPartition("t", 0), 1)
    assert log.sent == [("t", b"v", "k", "svc"), ("t", None, None, "other")]
