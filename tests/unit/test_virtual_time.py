"""One clock (broker.driver.clock) and virtual time (broker.testing.virtual_time) on the in-memory broker."""

from __future__ import annotations

import asyncio
import itertools
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

import broker
from broker import OutboundMessage
from broker.backoff import Backoff
from broker.driver.clock import clock, follow_loop, monotonic, wall
from broker.errors import ConfigError
from broker.retry import RetryPolicy
from broker.testing.virtual_time import check_virtual_time_url, virtual_time

ROOT = Path(__file__).resolve().parents[2]


def _url() -> str:
    return f"inmem://vt-{uuid.uuid4().hex}"


def test_the_clock_is_the_system_clock_outside_a_test_loop() -> None:
    assert clock.monotonic is time.monotonic and clock.time is time.time
    assert not clock.virtual
    assert abs(wall() - time.time()) < 1 and abs(monotonic() - time.monotonic()) < 1


async def test_follow_loop_reads_the_loop_and_restores_the_system_clock() -> None:
    loop = asyncio.get_running_loop()
    with follow_loop(loop) as followed:
        assert followed.virtual and clock.monotonic() == pytest.approx(loop.time(), abs=0.01)
        with pytest.raises(RuntimeError), follow_loop(loop):
            pass
    assert clock.monotonic is time.monotonic and clock.time is time.time and not clock.virtual


async def test_sleeping_takes_no_wall_time_and_the_clock_follows() -> None:
    started_wall = time.monotonic()
    with virtual_time() as vt:
        before_wall_clock = clock.time()
        await asyncio.sleep(3600)
        assert vt.elapsed() == pytest.approx(3600, abs=1e-6)
        assert clock.monotonic() == vt.now
        assert clock.time() - before_wall_clock == pytest.approx(3600, abs=1e-3)
    assert time.monotonic() - started_wall < 1
    assert not clock.virtual


async def test_time_advances_only_when_every_task_waits() -> None:
    order: list[tuple[str, float]] = []
    with virtual_time() as vt:

        async def sleeper(name: str, delay: float) -> None:
            await asyncio.sleep(delay)
            order.append((name, round(vt.elapsed(), 6)))

        async def busy() -> None:
            for _ in range(200):  # keeps a callback ready: no jump while it runs
                await asyncio.sleep(0)
            order.append(("busy", round(vt.elapsed(), 6)))

        await asyncio.gather(sleeper("late", 10), sleeper("early", 1), busy())
    assert order == [("busy", 0.0), ("early", 1.0), ("late", 10.0)]


async def test_the_loop_time_never_goes_back_after_virtual_time() -> None:
    loop = asyncio.get_running_loop()
    with virtual_time():
        await asyncio.sleep(100)
        inside = loop.time()
    assert loop.time() >= inside
    await asyncio.sleep(0.01)  # timers still work in real time
    assert loop.time() - inside < 5


async def test_ack_deadline_delayed_nack_and_publish_times_follow_virtual_time() -> None:
    with virtual_time() as vt:
        async with broker.connect(_url() + "?ack_deadline=30") as backend:
            await backend.publisher().topic("t").publish(OutboundMessage(b"x"))
            async with backend.messages("t", "s") as consumer:
                first = await consumer.next_message(timeout=60)
                taken = vt.elapsed()
                again = await consumer.next_message(timeout=60)  # never settled: back after 30 s
                assert again.delivery_attempt == 2
                assert vt.elapsed() - taken == pytest.approx(30, abs=0.01)
                await again.nack(delay=5)
                nacked = vt.elapsed()
                third = await consumer.next_message(timeout=60)
                assert vt.elapsed() - nacked == pytest.approx(5, abs=0.01)
                assert third.id == first.id
                await third.ack()
                with pytest.raises(broker.errors.Timeout):
                    await consumer.next_message(timeout=120)
                assert vt.elapsed() - nacked == pytest.approx(125, abs=0.02)
            assert first.publish_time is not None


async def test_batch_windows_of_batched_iterators_and_adapters_follow_virtual_time() -> None:
    from broker.adapt import batched_messages

    with virtual_time() as vt:
        async with broker.connect(_url()) as backend:
            topic = backend.publisher().topic("w")
            async with backend.batched_messages("w", "native", batch_size=10, batch_timeout=4) as native:
                async with batched_messages(backend.messages("w", "adapted"), 10, timeout=6) as adapted:
                    start = vt.elapsed()
                    assert await native.next_batch() == []  # an empty window: the full 4 s
                    assert vt.elapsed() - start == pytest.approx(4, abs=1e-3)
                    await topic.publish(OutboundMessage(b"1"))
                    start = vt.elapsed()
                    batch = await adapted.next_batch()  # one message, then the window runs out
                    assert [m.data for m in batch] == [b"1"]
                    assert vt.elapsed() - start == pytest.approx(6, abs=1e-3)
                    await batch[0].ack()
                    for message in await native.next_batch():
                        await message.ack()


async def test_retry_backoff_runs_on_the_virtual_schedule() -> None:
    attempts: list[float] = []
    with virtual_time() as vt:
        async with broker.connect(_url()) as backend:
            policy = RetryPolicy(
                max_attempts=4,
                backoff=Backoff(initial=1.0, multiplier=2.0, maximum=60.0),
                dead_letter="native",
            )
            receiver = backend.receiver("jobs", "workers", retry=policy, dead_letter_topic="jobs-dead")

            async def failing(message: broker.Message) -> None:
                attempts.append(round(vt.elapsed(), 3))
                raise ValueError("poison")

            await backend.publisher().topic("jobs").publish(OutboundMessage(b"p"))
            task = asyncio.create_task(receiver.receive(failing))
            async with backend.messages("jobs-dead", "check") as dead:
                message = await dead.next_message(timeout=600)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    assert message.data == b"p"
    gaps = [b - a for a, b in itertools.pairwise(attempts)]
    assert gaps == pytest.approx([1.0, 2.0, 4.0], abs=1e-6)


def test_virtual_time_refuses_a_real_broker_url() -> None:
    check_virtual_time_url(None)
    check_virtual_time_url("inmem://x")
    with pytest.raises(ConfigError, match="inmem:// only, not kafka://"):
        check_virtual_time_url("kafka://localhost:9092")

    async def main() -> None:
        with virtual_time(url="nats://localhost:4222"):
            pass

    with pytest.raises(ConfigError, match="not nats://"):
        asyncio.run(main())


def test_ruff_bans_the_system_clock_in_broker_and_inmem_only() -> None:
    """Ruff's TID251 ban applies to ``broker/`` and ``backends/inmem/`` and not to other backends.

    The probe goes to ruff on standard input under each path's name (``--stdin-filename``), so the
    configuration of that path applies and no file is written into the source tree (a file written
    there raced the tests that walk the tree on another worker)."""
    probe = "import time\n\nstarted = time.monotonic()\nnow = time.time()\n"

    def banned_at(path: str) -> int:
        found = subprocess.run(
            [
                sys.executable,
                "-m",
                "ruff",
                "check",
                "--select",
                "TID251",
                "--output-format",
                "concise",
                "--stdin-filename",
                str(ROOT / path),
                "-",
            ],
            cwd=ROOT,
            input=probe,
            capture_output=True,
            text=True,
        ).stdout
        return found.count("TID251")

    assert banned_at("broker/_clock_probe.py") == 2
    assert banned_at("backends/inmem/_clock_probe.py") == 2
    assert banned_at("backends/kafka/_clock_probe.py") == 0
