"""No commit reaches the SDK while its consumer closes.

librdkafka runs the revoke callback inside ``Consumer.close()``; a commit made there (the revoke's
flush of pending acks, or a commit round served on the worker thread by ``serve_until``) aborted
a full test run's worker (SIGABRT: the worker thread in ``_commit_sync`` under ``_on_revoke``
under the close). The last commits go out before the SDK's close; what comes after is dropped
(at-least-once: those records are read again).
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from broker.backends.kafka import sdk_consumer
from broker.backends.kafka.sdk_consumer import GroupCore


class _Partition:
    def __init__(self, topic: str, partition: int, offset: int = -1001) -> None:
        self.topic, self.partition, self.offset = topic, partition, offset
        self.error = None


class _ClosingConsumer:
    """An SDK consumer whose ``close()`` runs the revoke callback, as librdkafka's does."""

    def __init__(self) -> None:
        self.closing = False
        self.commits_during_close = 0
        self.commits = 0
        self.on_revoke: Any = None

    def subscribe(self, topics: list[str], on_assign: Any, on_revoke: Any, on_lost: Any) -> None:
        self.on_revoke = on_revoke

    def commit(self, *, offsets: list[Any], asynchronous: bool) -> list[Any]:
        self.commits += 1
        if self.closing:
            self.commits_during_close += 1  # librdkafka: the process aborts here
        return [_Partition(p.topic, p.partition, p.offset) for p in offsets]

    def close(self) -> None:
        self.closing = True
        self.on_revoke(self, [_Partition("t", 0)])

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


async def test_acks_pending_at_the_sdk_close_are_not_committed_inside_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fake = _ClosingConsumer()
    monkeypatch.setattr(sdk_consumer, "sdk_client", lambda kind, config: fake)
    config = {"group.id": "g", "session.timeout.ms": 6000}
    core = GroupCore(config, ["t"], name="c", prefetch=1, close_timeout=5)
    core._loop = asyncio.get_running_loop()
    await asyncio.sleep(0.05)  # the worker subscribed
    core.joined = True
    core.assigned.add(("t", 0))
    core.committers[("t", 0)] = sdk_consumer.PartitionCommitter(core, ("t", 0))

    async def before_close() -> None:  # an ack arrives just after the last flush
        core._pending_commits[("t", 0)] = 5

    monkeypatch.setattr(core, "_before_close", before_close)
    await core.close()
    assert fake.closing
    assert fake.commits_during_close == 0, "a commit was sent inside the SDK consumer's close"
