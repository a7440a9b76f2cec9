"""What a blocking ``for`` loop over records costs the loop thread: counted, not timed.

Each item the read-ahead task pulls is an await on the loop and a hand-over to the caller's
thread. A record iterator that reads in batches (``next_batch``, up to its ``batch_size``) is read
a batch at a time, so reading N records costs about N / batch_size pulls, not N, while the
read-ahead bound still holds and every record arrives once, in order.
"""

from __future__ import annotations

import sys
import uuid
from collections import Counter
from types import FrameType
from typing import Any

import broker.sync
from broker import OutboundMessage

COUNT = 1_000
BATCH = 100


def test_a_records_loop_pulls_the_source_a_batch_at_a_time() -> None:
    pulls: Counter[str] = Counter()

    def count(frame: FrameType, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code.co_name in ("next_record", "next_batch"):
            if frame.f_code.co_filename.endswith("log.py"):  # the in-memory log's record iterator
                pulls[frame.f_code.co_name] += 1

    with broker.sync.connect(f"inmem://records-{uuid.uuid4().hex}", timeout=30) as backend:
        topic = backend.publisher().topic("log")
        topic.batch_publish(*(OutboundMessage(b"%d" % i, f"k{i}") for i in range(COUNT)))
        backend._call(_profile_loop_thread, count, what="profiling")
        try:
            with backend.records("log", "group", read_ahead=2 * BATCH, batch_size=BATCH) as records:
                seen: list[bytes | None] = []
                for record in records:
                    seen.append(record.value)
                    assert len(records._buffer) <= 2 * BATCH  # the read-ahead bound holds
                    if len(seen) == COUNT:
                        break
                record.commit()
                records.commit(timeout=30)
        finally:
            backend._call(_profile_loop_thread, None, what="profiling")
    assert seen == [b"%d" % i for i in range(COUNT)]
    assert sum(pulls.values()) <= 3 * COUNT // BATCH, f"{dict(pulls)} pulls for {COUNT} records"


async def _profile_loop_thread(hook: Any) -> None:
    sys.setprofile(hook)  # runs on the loop thread: profiles that thread only
