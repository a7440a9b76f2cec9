"""Helpers the Kafka package shares: settling futures once, making SDK clients, ``Log.produce``."""

from __future__ import annotations

import asyncio

import pytest

from broker.backends.kafka.threads import reject, resolve, sdk_client
from broker.errors import ConfigError


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
