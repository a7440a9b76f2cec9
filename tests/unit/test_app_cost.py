"""What broker.App costs per message over the hand-written receiver loop it replaces, by counts.

Both sides consume the same orders from ``inmem://`` one handler at a time, decode them with the
same binding's decoder and ack them. Function calls (Python and built-in, as :mod:`cProfile`
counts them) are counted over the steady state only: from the 100th handled message to the
1,100th, so connecting, entering and draining are not counted. Counts, unlike a clock, do not
depend on the load of the machine.
"""

from __future__ import annotations

import asyncio
import cProfile
import pstats
import uuid
from collections.abc import Awaitable, Callable

import pydantic

import broker
from broker import Message, OutboundMessage, typed
from broker.app import App


class Order(pydantic.BaseModel):
    id: int
    item: str
    qty: int


BINDING = typed.binding(Order)
TOTAL = 1_200
START, STOP = 100, 1_100  # the messages between which calls are counted
#: Function calls a message may cost the App beyond the hand loop: none. A payload-only subscriber
#: runs one coroutine a message, as the hand loop's handler is one: decoding, the handler call, the
#: lease keeper's hold and release and the ack are inline in it, and it applies the receiver's
#: failure rule itself (the receiver's own wrapper coroutine is not run).
ALLOWANCE = 0


class Counter:
    """Counts the calls made between the ``START``th and the ``STOP``th handled message."""

    def __init__(self) -> None:
        self.profile = cProfile.Profile()
        self.seen = 0
        self.done = asyncio.Event()

    def tick(self) -> None:
        self.seen += 1
        if self.seen == START:
            self.profile.enable()
        elif self.seen == STOP:
            self.profile.disable()
        if self.seen == TOTAL:
            self.done.set()

    def per_message(self) -> tuple[float, dict[str, float]]:
        """Calls per message, in all and by function."""
        stats = pstats.Stats(self.profile)
        by_function = {
            f"{path.rsplit('/', 1)[-1]}({name})": row[1] / (STOP - START)
            for (path, _, name), row in stats.stats.items()  # type: ignore[attr-defined]
        }
        return stats.total_calls / (STOP - START), by_function  # type: ignore[attr-defined]


async def fill(url: str) -> tuple[str, str]:
    topic, subscription = f"cost-{uuid.uuid4().hex[:8]}", "bench"
    attributes = {"content-type": BINDING.content_type}
    async with broker.connect(url) as backend:
        async with backend.messages(topic, subscription):
            pass  # the subscription exists before the messages are published
        await (
            backend.publisher()
            .topic(topic)
            .batch_publish(
                *(
                    OutboundMessage(BINDING.encoder(Order(id=i, item="book", qty=i % 7)), None, attributes)
                    for i in range(TOTAL)
                )
            )
        )
    return topic, subscription


async def app_side(url: str) -> Counter:
    topic, subscription = await fill(url)
    counter = Counter()
    app = App(url)

    @app.subscriber(topic, subscription)
    async def handle(order: Order) -> None:
        counter.tick()

    async with app.lifespan(ping_timeout=None):
        await asyncio.wait_for(counter.done.wait(), 30)
    return counter


async def hand_side(url: str) -> Counter:
    topic, subscription = await fill(url)
    counter = Counter()
    decode = BINDING.decoder
    async with broker.connect(url) as backend:
        receiver = backend.receiver(topic, subscription)

        async def handle(message: Message) -> None:
            decode(message.data)
            counter.tick()
            await message.ack()

        running = asyncio.create_task(receiver.receive(handle))
        await asyncio.wait_for(counter.done.wait(), 30)
        receiver.stop(30)
        await running
    return counter


async def per_message(side: Callable[[str], Awaitable[Counter]]) -> tuple[float, dict[str, float]]:
    counter = await side(f"inmem://cost-{uuid.uuid4().hex[:8]}")
    assert counter.seen == TOTAL  # nothing lost, nothing handled twice
    return counter.per_message()


async def test_an_app_subscriber_costs_at_most_a_few_calls_a_message_over_the_hand_loop() -> None:
    app_calls, app_functions = await per_message(app_side)
    hand_calls, hand_functions = await per_message(hand_side)
    extra = {
        name: round(count - hand_functions.get(name, 0.0), 2)
        for name, count in app_functions.items()
        if count - hand_functions.get(name, 0.0) >= 0.5
    }
    assert app_calls <= hand_calls + ALLOWANCE, (
        f"the App makes {app_calls:.2f} calls a message, the hand loop {hand_calls:.2f}; "
        f"the App's extra calls a message: {extra}"
    )
