"""``@app.records`` on inmem:// in virtual time: per-partition order, partitions in parallel, per-key
lanes, commits never past an unfinished record (checked by a restart), retries in place, drains."""

from __future__ import annotations

import asyncio
import uuid
from collections import defaultdict
from typing import Annotated

import pydantic
import pytest

import broker
from broker import OutboundMessage, Record
from broker.app import App, Key
from broker.backoff import Backoff
from broker.errors import ConfigError
from broker.retry import ATTR_REASON, DeadLetterTopic, RetryPolicy
from broker.testing import virtual_time, wait_until


class Click(pydantic.BaseModel):
    user: str
    n: int


def url(partitions: int = 4) -> str:
    return f"inmem://records-{uuid.uuid4().hex[:8]}?partitions={partitions}"


async def publish(address: str, clicks: list[Click]) -> None:
    async with broker.connect(address) as backend:
        await (
            backend.publisher()
            .topic("clicks")
            .batch_publish(*(OutboundMessage(c.model_dump_json().encode(), key=c.user) for c in clicks))
        )


async def test_records_of_a_partition_run_in_order_and_partitions_in_parallel() -> None:
    address = url(4)
    clicks = [Click(user=f"u{i % 8}", n=i) for i in range(200)]
    handled: dict[int, list[int]] = defaultdict(list)
    running = {"now": 0, "most": 0}
    app = App(address)

    @app.records("clicks", "stats")
    async def count(click: Click, record: Record, user: Annotated[str | None, Key]) -> None:
        assert user == click.user
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(0.5 + (click.n % 3) * 0.25)
        running["now"] -= 1
        handled[record.partition].append(record.offset)

    with virtual_time():
        await publish(address, clicks)
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: sum(len(v) for v in handled.values()) == 200, 600)
    assert all(offsets == sorted(offsets) for offsets in handled.values())  # in order per partition
    assert (
        sorted(o for v in handled.values() for o in v) == sorted(o for v in handled.values() for o in v)
        and sum(len(set(v)) for v in handled.values()) == 200
    )  # each once
    assert running["most"] == len(handled) > 1  # one lane per partition, all at once


async def test_a_commit_never_passes_an_unfinished_record_of_its_partition() -> None:
    # per_key on one partition: key "slow" holds its record while "fast" ones finish after it.
    # The app stops (no drain) while "slow" runs; the restarted app must be given "slow" again.
    address = url(1)
    clicks = [Click(user="slow", n=0)] + [Click(user="fast", n=i) for i in range(1, 6)]
    first: list[int] = []
    second: list[int] = []
    release = asyncio.Event()
    app = App(address)

    @app.records("clicks", "stats", per_key=True)
    async def handle(click: Click) -> None:
        (second if release.is_set() else first).append(click.n)
        if click.user == "slow" and not release.is_set():
            await asyncio.sleep(3600)

    with virtual_time():
        await publish(address, clicks)
        async with app.lifespan(ping_timeout=None, drain_timeout=0):
            await wait_until(lambda: len(first) == 6, 60)  # "slow" started; the fast ones finished
        release.set()
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: 0 in second, 60)
            await asyncio.sleep(5)
    assert sorted(first) == [0, 1, 2, 3, 4, 5]
    assert second[0] == 0  # committed below "slow": it is read again, and the fast ones after it
    assert sorted(second) == [0, 1, 2, 3, 4, 5]


async def test_per_key_lanes_keep_each_keys_order_and_run_keys_in_parallel() -> None:
    address = url(1)
    clicks = [Click(user=f"u{i % 3}", n=i) for i in range(30)]
    seen: dict[str, list[int]] = defaultdict(list)
    running = {"now": 0, "most": 0}
    app = App(address)

    @app.records("clicks", "stats", per_key=True, concurrency=2)
    async def handle(click: Click) -> None:
        running["now"] += 1
        running["most"] = max(running["most"], running["now"])
        await asyncio.sleep(1)
        running["now"] -= 1
        seen[click.user].append(click.n)

    with virtual_time():
        await publish(address, clicks)
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: sum(len(v) for v in seen.values()) == 30, 600)
    assert all(v == sorted(v) and len(v) == 10 for v in seen.values())
    assert running["most"] == 2  # keys in parallel, bounded by concurrency


async def test_a_failing_record_is_retried_in_place_then_dead_lettered_and_its_partition_goes_on() -> None:
    address = url(1)
    clicks = [Click(user="a", n=i) for i in range(4)]
    attempts: dict[int, int] = defaultdict(int)
    done: list[int] = []
    app = App(address)
    policy = RetryPolicy(
        max_attempts=3, backoff=Backoff(initial=1, maximum=1), dead_letter=DeadLetterTopic("dead")
    )

    @app.records("clicks", "stats", retry=policy)
    async def handle(click: Click) -> None:
        attempts[click.n] += 1
        if click.n == 1:
            raise RuntimeError("cannot count this one")
        done.append(click.n)

    with virtual_time():
        await publish(address, clicks)
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: len(done) == 3, 60)
        async with broker.connect(address) as backend, backend.messages("dead", "inspect") as dead:
            letter = await dead.next_message(timeout=10)
            await letter.ack()
    assert done == [0, 2, 3] and attempts[1] == 3  # in place: 2 and 3 waited for 1's attempts
    assert letter.attributes[ATTR_REASON].startswith("failed 3 attempts")
    assert letter.key == "a"


async def test_an_undecodable_record_goes_to_the_dead_letter_topic() -> None:
    address = url(1)
    done: list[int] = []
    app = App(address)

    @app.records("clicks", "stats", retry=RetryPolicy(dead_letter=DeadLetterTopic("dead")))
    async def handle(click: Click) -> None:
        done.append(click.n)

    with virtual_time():
        async with broker.connect(address) as backend:
            topic = backend.publisher().topic("clicks")
            await topic.publish(OutboundMessage(b"not json"))
            await topic.publish(OutboundMessage(Click(user="b", n=7).model_dump_json().encode()))
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: done == [7], 60)
        async with broker.connect(address) as backend, backend.messages("dead", "inspect") as dead:
            letter = await dead.next_message(timeout=10)
            await letter.ack()
    assert letter.data == b"not json"
    assert letter.attributes[ATTR_REASON] == "non-retryable DecodeError"


async def test_a_drained_stop_then_a_restart_loses_nothing() -> None:
    address = url(3)
    clicks = [Click(user=f"u{i % 5}", n=i) for i in range(90)]
    handled: list[int] = []
    app = App(address)

    @app.records("clicks", "stats", max_in_flight=10)
    async def handle(click: Click) -> None:
        await asyncio.sleep(1)
        handled.append(click.n)

    with virtual_time():
        await publish(address, clicks)
        async with app.lifespan(ping_timeout=None, drain_timeout=1.5):
            await wait_until(lambda: len(handled) >= 20, 600)
        stopped_at = len(handled)
        async with app.lifespan(ping_timeout=None):
            await wait_until(lambda: set(handled) == set(range(90)), 600)
    assert stopped_at < 90
    # redone only what was read past the last commit: at most max_in_flight per restart
    assert len(handled) - 90 <= 10


def test_bad_records_declarations_are_config_errors() -> None:
    app = App("inmem://unused")
    with pytest.raises(ConfigError, match="concurrency"):
        app.records("clicks", "g", concurrency=0)
    with pytest.raises(ConfigError, match="max_in_flight"):
        app.records("clicks", "g", max_in_flight=0)
    with pytest.raises(ConfigError, match="group"):
        app.records("clicks", "")
    with pytest.raises(ConfigError, match="Record, not a Message"):

        @app.records("clicks", "g")
        async def wrong(message: broker.Message) -> None: ...

    with pytest.raises(ConfigError, match="one record at a time"):

        @app.records("clicks", "g")
        async def batch(clicks: list[Click]) -> None: ...

    with pytest.raises(ConfigError, match=r"@app\.records"):

        @app.subscriber("clicks", "s")
        async def not_a_record(record: Record) -> None: ...
