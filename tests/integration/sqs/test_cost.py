"""What the SQS backend's own code costs per message, counted (not timed) against the moto fake:
the Python calls into polybroker's code on the publish (batches of ten) and receive + delete
paths, and the botocore event handlers of ours that run on each request. ``bench/sqs.py`` times
the same paths; these counts hold on a loaded machine where CPU times swing."""

from __future__ import annotations

import inspect
import os
import sys
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

import broker
from broker import OutboundMessage
from broker.backends.sqs.backend import SqsBackend
from broker.driver.devserver import ProcessServer

#: Our code: the core and (through its symlink) the backends.
_OURS = os.path.dirname(os.path.abspath(broker.__file__)) + os.sep
#: Code objects of coroutines are entered again on every resume, as often as the network makes
#: them wait; only the other calls are counted (they depend on the messages alone).
_RESUMED = inspect.CO_COROUTINE | inspect.CO_ITERABLE_COROUTINE | inspect.CO_ASYNC_GENERATOR

COUNT = 20
BATCH = 10


@contextmanager
def counting_our_calls() -> Iterator[Counter[str]]:
    """Count the calls into polybroker's code (coroutine resumes left out) while the block runs."""
    calls: Counter[str] = Counter()

    def profile(frame: FrameType, event: str, _: Any) -> None:
        if event == "call":
            code = frame.f_code
            if code.co_filename.startswith(_OURS) and not code.co_flags & _RESUMED:
                calls[code.co_name] += 1

    sys.setprofile(profile)
    try:
        yield calls
    finally:
        sys.setprofile(None)


async def test_publish_and_receive_delete_cost_a_few_calls_of_ours_per_message(
    moto_server_fake: ProcessServer,
) -> None:
    connected = broker.connect(f"{moto_server_fake.url}&mode=queue&wait_time=1")
    assert isinstance(connected, SqsBackend)
    async with connected as backend:
        name = f"cost-{uuid.uuid4().hex[:8]}"
        topic = backend.publisher().topic(name)
        await backend.connection.target(name)  # the queue made and its size limit read first
        messages = [OutboundMessage(b"x" * 100) for _ in range(COUNT)]
        with counting_our_calls() as publishing:
            for first in range(0, COUNT, BATCH):
                await topic.batch_publish(*messages[first : first + BATCH])
        received = takes = 0
        async with backend.batched_messages(name, "s", batch_size=BATCH) as consumer:
            with counting_our_calls() as consuming:
                while received < COUNT:
                    batch = await consumer.next_batch(timeout=10)
                    await broker.ack_all(batch)
                    received += len(batch)
                    takes += 1
        assert await backend.backlog(name, "s") == 0  # every message received and deleted
    assert received == COUNT
    # the certificate handler runs only against an https:// endpoint: the fake is plain http
    assert publishing["_no_retry_on_a_refused_certificate"] == 0, publishing
    assert consuming["_no_retry_on_a_refused_certificate"] == 0, consuming
    batches = COUNT // BATCH
    # per message: its entry and its body; per batch: six (the batch check, the entries, the
    # chunking, the answer's failures), no generator walked per message
    assert sum(publishing.values()) <= 2 * COUNT + 6 * batches, publishing
    # per message: its mapping, its receipt handle, its settled check; per receive and delete:
    # thirteen (the buffer, the ack deadlines, the claims, the entries), none per request
    assert sum(consuming.values()) <= 3 * COUNT + 13 * takes, consuming
