"""broker.run: several receivers until a signal or a stop event; drain; close backends in order."""

from __future__ import annotations

import asyncio
import os
import signal
import uuid

import pytest

import broker
from broker import adapt
from broker.driver.testing.harness import drain, wait_until
from broker.errors import ClosedError, ConfigError, ConnectionFailed, ReceiveError
from broker.message import Message, OutboundMessage
from tests.unit.scripted import ScriptedIterator


async def test_sigterm_drains_every_receiver_and_closes_backends_in_order() -> None:
    backend = broker.connect(f"inmem://run-{uuid.uuid4().hex}")
    closed: list[str] = []

    class Tracked:
        def __init__(self, name: str) -> None:
            self.name = name

        async def close(self) -> None:
            closed.append(self.name)

    handled: list[bytes] = []
    slow_started = asyncio.Event()

    async def fast(message: Message) -> None:
        handled.append(message.data)
        await message.ack()

    async def slow(message: Message) -> None:
        slow_started.set()
        await asyncio.sleep(0.2)  # finishes within the drain timeout
        handled.append(message.data)
        await message.ack()

    orders = backend.receiver("orders", "s", concurrency=2)
    refunds = backend.receiver("refunds", "s")
    await backend.publisher().topic("orders").batch_publish(OutboundMessage(b"o1"), OutboundMessage(b"o2"))
    await backend.publisher().topic("refunds").publish(OutboundMessage(b"r1"))

    async def terminate() -> None:
        await slow_started.wait()
        os.kill(os.getpid(), signal.SIGTERM)

    killer = asyncio.ensure_future(terminate())
    async with asyncio.timeout(10):
        code = await broker.run(
            (orders, fast),
            (refunds, slow),
            backends=[Tracked("first"), Tracked("second")],  # type: ignore[list-item]
            drain_timeout=2.0,
        )
    await killer
    assert code == 0
    assert sorted(handled) == [b"o1", b"o2", b"r1"]  # the in-flight handler finished
    assert closed == ["first", "second"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL or True  # handler removed (no error)
    async with backend.messages("refunds", "s") as again:
        assert await drain(again, 0.1) == []
    await backend.close()


async def test_stop_event_and_a_failing_receiver_give_exit_code_1() -> None:
    broken = ScriptedIterator()
    broken.feed(ReceiveError("the broker went away"))
    fine = ScriptedIterator()
    fine.feed(1)

    async def handler(message: Message) -> None:
        await message.ack()

    async with asyncio.timeout(5):
        code = await broker.run((adapt.receiver(broken), handler), (adapt.receiver(fine), handler))
    assert code == 1
    assert fine.acker.acked == ["1"]


async def test_drain_timeout_nacks_handlers_that_do_not_finish() -> None:
    source = ScriptedIterator()
    source.feed(1)
    stop = asyncio.Event()
    started = asyncio.Event()

    async def stuck(message: Message) -> None:
        started.set()
        await asyncio.sleep(3600)

    receiver = adapt.receiver(source)
    task = asyncio.ensure_future(broker.run((receiver, stuck), drain_timeout=0.1, stop=stop))
    await started.wait()
    stop.set()
    async with asyncio.timeout(5):
        assert await task == 0
    assert source.acker.nacked == [("1", None)]
    assert source.acker.acked == []


async def _until_handled(signum: int) -> None:
    """Wait until the running loop handles ``signum`` (``broker.run`` installed its handler): a
    signal sent before would reach the test runner's own handler instead."""
    handlers = asyncio.get_running_loop()._signal_handlers  # type: ignore[attr-defined]
    async with asyncio.timeout(5):
        while signum not in handlers:  # noqa: ASYNC110 - nothing to wait on but the loop's table
            await asyncio.sleep(0.01)


async def test_a_second_signal_cuts_the_drain_short() -> None:
    class Stubborn:  # a receiver whose stop() is ignored until cancelled
        def __init__(self) -> None:
            self.cancelled = False

        def stop(self, drain_timeout: float | None = None) -> None:
            pass

        async def receive(self, handler: object) -> None:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                self.cancelled = True
                raise

    async def handler(message: Message) -> None:
        pass

    stubborn = Stubborn()
    task = asyncio.ensure_future(broker.run((stubborn, handler), drain_timeout=60))
    await _until_handled(signal.SIGINT)
    os.kill(os.getpid(), signal.SIGINT)
    await asyncio.sleep(0.05)
    os.kill(os.getpid(), signal.SIGINT)
    async with asyncio.timeout(5):
        assert await task == 0
    assert stubborn.cancelled


async def test_bad_arguments_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        await broker.run(("not a receiver", print))  # type: ignore[arg-type]
    with pytest.raises(ConfigError):
        await broker.run(drain_timeout=-1)


async def test_all_receivers_ending_ends_the_run() -> None:
    source = ScriptedIterator()
    source.feed(1, None)  # then the source closes: the receiver returns

    async def handler(message: Message) -> None:
        await message.ack()

    async with asyncio.timeout(5):
        assert await broker.run((adapt.receiver(source), handler)) == 0
    await wait_until(lambda: source.acker.acked == ["1"], 1)


async def test_a_backend_at_a_wrong_host_fails_the_run_at_start() -> None:
    """``run`` pings its backends before any receiver starts: one at a wrong host (here the
    publishing side, which no receiver would ever touch) raises ConnectionFailed at once, every
    backend is closed, and the waiting message is left for the next run (nothing taken, nothing lost)."""
    from broker.driver.testing.ping import unreachable

    name = f"inmem://run-ping-{uuid.uuid4().hex}"
    consuming = broker.connect(name)
    wrong = unreachable("rabbitmq://guest:guest@127.0.0.1:5672/")
    assert isinstance(wrong, str)
    publishing = broker.connect(wrong)
    await consuming.publisher().topic("orders").publish(OutboundMessage(b"o1"))
    handled: list[bytes] = []

    async def handle(message: Message) -> None:
        handled.append(message.data)
        await message.ack()

    receiver = consuming.receiver("orders", "s")
    async with asyncio.timeout(5):  # without the ping the run would go on until stopped
        with pytest.raises(ConnectionFailed, match=r"127\.0\.0\.1"):
            await broker.run(
                (receiver, handle), backends=[consuming, publishing], signals=(), stop=asyncio.Event()
            )
    assert handled == []
    with pytest.raises(ClosedError):
        consuming.publisher()
    with pytest.raises(ClosedError):
        publishing.publisher()
    async with broker.connect(name) as again, again.messages("orders", "s") as messages:
        assert [m.data for m in await drain(messages, 0.1)] == [b"o1"]
