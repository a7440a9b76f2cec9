"""broker.driver.publishing: the Publisher/Topic every backend shares, over a recording driver."""

from __future__ import annotations

from collections.abc import Sequence

import pytest

import broker
from broker.driver.publishing import DriverPublisher
from broker.errors import ClosedError, ConfigError, InvalidMessage
from broker.message import OutboundMessage


class RecordingDriver:
    """A PublishDriver that keeps what it was given (no broker)."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, list[bytes], float | None]] = []
        self.checked: list[str] = []
        self.closes = 0

    def check_topic(self, name: str) -> None:
        if name.startswith("bad"):
            raise ConfigError(f"no topic may be called {name!r}")
        self.checked.append(name)

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        self.sent.append((topic, [m.data for m in messages], timeout))

    async def close(self) -> None:
        self.closes += 1


async def test_topics_are_cached_named_and_checked_once() -> None:
    driver = RecordingDriver()
    publisher = DriverPublisher(driver)
    assert publisher.topic("orders") is publisher.topic("orders")
    assert driver.checked == ["orders"]
    for name in ("", None, 5):
        with pytest.raises(ConfigError):
            publisher.topic(name)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="bad-name"):
        publisher.topic("bad-name")


async def test_messages_are_validated_before_the_driver_sees_them() -> None:
    driver = RecordingDriver()
    topic = DriverPublisher(driver).topic("t")
    with pytest.raises(InvalidMessage):
        await topic.publish(OutboundMessage("text"))  # type: ignore[arg-type]
    with pytest.raises(InvalidMessage):
        await topic.batch_publish(OutboundMessage(b"ok"), OutboundMessage(b"x", key=5))  # type: ignore[arg-type]
    await topic.batch_publish()
    assert driver.sent == []
    await topic.publish(OutboundMessage(b"a"), timeout=2.0)
    await topic.batch_publish(OutboundMessage(b"b"), OutboundMessage(b"c"))
    assert driver.sent == [("t", [b"a"], 2.0), ("t", [b"b", b"c"], None)]


async def test_interceptors_replace_keep_or_drop_messages_and_are_validated() -> None:
    driver = RecordingDriver()
    publisher = DriverPublisher(driver, interceptors=[lambda topic, messages: None])
    publisher.intercept(lambda topic, messages: [OutboundMessage(m.data.upper()) for m in messages])
    await publisher.topic("t").publish(OutboundMessage(b"a"))
    publisher.intercept(lambda topic, messages: [])
    await publisher.topic("t").publish(OutboundMessage(b"dropped"))
    assert driver.sent == [("t", [b"A"], None)]
    bad = DriverPublisher(RecordingDriver(), interceptors=[lambda t, m: [OutboundMessage(None)]])  # type: ignore[arg-type, list-item]
    with pytest.raises(InvalidMessage):
        await bad.topic("t").publish(OutboundMessage(b"a"))


async def test_close_is_idempotent_and_final() -> None:
    driver = RecordingDriver()
    publisher = DriverPublisher(driver)
    topic = publisher.topic("t")
    async with publisher:
        pass
    await publisher.close()
    assert driver.closes == 1 and publisher.closed
    with pytest.raises(ClosedError):
        publisher.topic("t")
    with pytest.raises(ClosedError):
        await topic.publish(OutboundMessage(b"late"))
    with pytest.raises(ClosedError):
        await topic.batch_publish(OutboundMessage(b"late"))
    assert driver.sent == []


async def test_every_backend_here_publishes_through_the_portable_layer() -> None:
    async with broker.connect("inmem://layer") as backend:
        assert isinstance(backend.publisher(), DriverPublisher)


async def test_a_driver_that_sends_at_once_is_called_without_an_await_and_transactions_still_buffer() -> None:
    class Immediate(RecordingDriver):
        def send_now(self, topic: str, messages: Sequence[OutboundMessage]) -> None:
            self.sent.append((topic, [m.data for m in messages], -1.0))

    driver = Immediate()
    await DriverPublisher(driver).topic("t").publish(OutboundMessage(b"a"), timeout=3)
    assert driver.sent == [("t", [b"a"], -1.0)]
    async with broker.connect("inmem://layer-txn") as backend:
        async with backend.messages("t", "s") as consumer:
            txn = backend.transactional_publisher()
            with pytest.raises(broker.errors.TransactionError):
                await txn.topic("t").publish(OutboundMessage(b"outside"))
            await txn.begin()
            await txn.topic("t").publish(OutboundMessage(b"inside"))
            with pytest.raises(TimeoutError):
                await consumer.next_message(timeout=0.2)
            await txn.commit()
            assert (await consumer.next_message(timeout=2)).data == b"inside"
