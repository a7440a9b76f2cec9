"""Three processor members on Tansu keep co-partitioned inputs together (issue 34, point 2).

The processor forces librdkafka's ``range`` assignor; each member must own the same partition
numbers of both inputs, and after one member's application restarts (a new Processor, the broker
untouched) the group still splits the partitions that way and no count is lost.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

import pytest

from broker.backends.kafka.backend import KafkaBackend
from broker.backends.kafka.processor import Context, Emitter, Processor, define_group, inputs, persist
from broker.log import TopicPartition
from broker.testing import wait_until
from tests.integration.kafka.support import unique

pytestmark = pytest.mark.slow

PARTITIONS = 6
PATIENCE = 40.0


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


def owned_numbers(members: Sequence[Processor]) -> list[frozenset[int]]:
    return [m.partitions for m in members]


def copartitioned(members: Sequence[Processor], topics: Sequence[str]) -> bool:
    numbers = owned_numbers(members)
    if any(not n for n in numbers):
        return False
    if sorted(p for n in numbers for p in n) != list(range(PARTITIONS)):
        return False
    for member in members:
        consumer = member._consumer
        if consumer is None:
            return False
        assigned = consumer.assignment()
        expected = {TopicPartition(t, p) for t in topics for p in member.partitions}
        if assigned != expected:
            return False
    return True


async def test_three_members_stay_copartitioned_across_an_application_restart(
    exact_backend: KafkaBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = exact_backend.log()
    strategies: list[object] = []
    join = log.consumer

    def member(*args: Any, **kwargs: Any) -> Any:
        strategies.append(kwargs.get("assignment_strategy"))
        return join(*args, **kwargs)

    monkeypatch.setattr(log, "consumer", member)
    clicks, views, group = unique("clicks"), unique("views"), unique("copart")
    for topic in (clicks, views):
        await log.create_topic(topic, PARTITIONS)
    graph = define_group(group, inputs([clicks, views], "str", count), persist("int64"))
    members = [Processor(log, graph, commit_interval=0.2) for _ in range(3)]
    for member in members:
        member.start()
    try:
        await wait_until(lambda: copartitioned(members, [clicks, views]), PATIENCE)
        users = [f"user-{i}" for i in range(30)]
        async with Emitter(log, clicks, "str") as a, Emitter(log, views, "str") as b:
            for user in users:
                a.emit(user, "c")
                b.emit(user, "v")

        def total(ms: Sequence[Processor]) -> int:
            found = 0
            for user in users:
                for m in ms:
                    try:
                        found += m.get(user) or 0
                        break
                    except Exception:
                        continue
            return found

        await wait_until(lambda: total(members) == 2 * len(users), PATIENCE)
        # The third application restarts: a new Processor of the same group joins.
        await members[2].stop(10)
        assert members[2].error is None
        members[2] = Processor(log, graph, commit_interval=0.2)
        members[2].start()
        await wait_until(lambda: copartitioned(members, [clicks, views]), PATIENCE)
        async with Emitter(log, clicks, "str") as a:
            for user in users:
                a.emit(user, "c")
        await wait_until(lambda: total(members) == 3 * len(users), PATIENCE)
        assert all(m.error is None for m in members)
        assert strategies == ["range"] * 4  # every member joined with the range assignor
    finally:
        await asyncio.gather(*(m.stop(10) for m in members))
