"""Many threads publishing through one blocking publisher at once: nothing lost, nothing duplicated."""

from __future__ import annotations

import threading
import uuid

import broker.sync
from broker import OutboundMessage

THREADS = 16
PER_THREAD = 5_000


def test_16_threads_publish_5000_each_nothing_lost_or_duplicated() -> None:
    with broker.sync.connect(f"inmem://threads-{uuid.uuid4().hex}") as backend:
        consumer = backend.messages("orders", "all", read_ahead=1_000)
        publisher = backend.publisher(max_pending=20_000)  # small enough that threads wait for room
        handle = publisher.topic("orders")
        errors: list[BaseException] = []
        start = threading.Barrier(THREADS)

        def publish(n: int) -> None:
            try:
                start.wait()
                for i in range(PER_THREAD):
                    message = OutboundMessage(f"{n}:{i}".encode(), key=str(n))
                    if i % 500 == 499:
                        handle.publish(message)  # waiting publishes mixed into the stream
                    else:
                        handle.publish_nowait(message)
            except BaseException as exc:  # pragma: no cover - reported below
                errors.append(exc)

        threads = [threading.Thread(target=publish, args=(n,)) for n in range(THREADS)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        assert not any(thread.is_alive() for thread in threads), "a publishing thread hung"
        publisher.flush(timeout=60)
        assert errors == []
        seen: list[bytes] = []
        while len(seen) < THREADS * PER_THREAD:  # a missing message fails (Timeout), never hangs
            message = consumer.next_message(timeout=10)
            seen.append(message.data)
            message.ack()
        consumer.flush()
        assert len(seen) == len(set(seen)) == THREADS * PER_THREAD
        assert set(seen) == {f"{n}:{i}".encode() for n in range(THREADS) for i in range(PER_THREAD)}
        # each thread's messages arrive in the order it handed them over (one key per thread)
        by_thread: dict[bytes, list[int]] = {}
        for data in seen:
            n, i = data.split(b":")
            by_thread.setdefault(n, []).append(int(i))
        assert all(order == sorted(order) for order in by_thread.values())
