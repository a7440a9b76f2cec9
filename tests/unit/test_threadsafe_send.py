"""``DriverPublisher.threadsafe_send``: the blocking API skips the loop only where nothing must run on it."""

from __future__ import annotations

from collections.abc import Sequence

from broker import OutboundMessage
from broker.driver.publishing import DeliveryDone, DriverPublisher, ThreadSafePublishDriver


class ThreadSafeDriver:
    """A publish driver with a thread-safe send that records what it was given."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Sequence[OutboundMessage]]] = []

    def check_topic(self, name: str) -> None:
        pass

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        self.sent.append((topic, messages))

    def send_threadsafe(
        self, topic: str, messages: Sequence[OutboundMessage], done: DeliveryDone, timeout: float
    ) -> None:
        self.sent.append((topic, messages))
        done(None)

    async def close(self) -> None:
        pass


async def test_a_plain_publisher_offers_the_drivers_threadsafe_send() -> None:
    driver = ThreadSafeDriver()
    assert isinstance(driver, ThreadSafePublishDriver)
    publisher = DriverPublisher(driver)
    send = publisher.threadsafe_send()
    assert send is not None
    outcomes: list[BaseException | None] = []
    send("t", [OutboundMessage(b"x")], outcomes.append, 1.0)
    assert outcomes == [None] and driver.sent[0][0] == "t"


async def test_interceptors_middleware_or_close_turn_it_off() -> None:
    for change in ("intercept", "wrap_send", "close"):
        publisher = DriverPublisher(ThreadSafeDriver())
        if change == "intercept":
            publisher.intercept(lambda topic, messages: None)
        elif change == "wrap_send":

            async def middleware(topic, messages, send):  # type: ignore[no-untyped-def]
                await send(messages)

            publisher.wrap_send(middleware)
        else:
            await publisher.close()
        assert publisher.threadsafe_send() is None, change


async def test_a_driver_without_one_offers_none() -> None:
    class Plain(ThreadSafeDriver):
        send_threadsafe = None  # type: ignore[assignment]

    assert DriverPublisher(Plain()).threadsafe_send() is None
