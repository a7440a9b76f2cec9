"""broker.App with a schema binding (``Annotated[T, schemas.avro(...)]``): writer schemas are looked up off
the event loop before the payload is decoded, so a silent registry never holds the loop."""

import asyncio
import time
from typing import Annotated, Any

from broker import OutboundMessage, schemas
from broker.app import App
from broker.backoff import Backoff
from broker.retry import RetryPolicy
from tests.schema_registry_stub import registry_stub
from tests.unit.schemas.support import ORDER_V1
from tests.unit.schemas.test_errors import ORDER, silent_registry


async def test_a_silent_registry_does_not_hold_the_apps_event_loop() -> None:
    timeout = 2.0  # a lookup on the loop would hold it this long
    with silent_registry() as (url, accepted):
        binding = schemas.avro(schemas.Registry(url, timeout=timeout, max_retries=0), ORDER_V1)
        app = App("inmem://unused")
        handled: list[Any] = []

        @app.subscriber(
            "orders", "s", retry=RetryPolicy(backoff=Backoff(initial=0.05, maximum=0.05), dead_letter=None)
        )
        async def handle(order: Annotated[dict[str, Any], binding]) -> None:
            handled.append(order)

        lags: list[float] = []
        async with app.testing(virtual_time=False) as test:
            await test.publish("orders", OutboundMessage(b"\x00\x00\x00\x00\x07\x02\x02a\x02"))
            end = time.perf_counter() + 3.0
            while time.perf_counter() < end:  # the loop's own lag while the app keeps failing the lookup
                before = time.perf_counter()
                await asyncio.sleep(0.01)
                lags.append(time.perf_counter() - before - 0.01)
            attempts = len(test.deliveries)
    assert handled == []  # the registry never answered
    assert attempts >= 2 and len(accepted) >= 1, (attempts, len(accepted))  # retried; looked up off the loop
    # a lookup on the loop holds it for the whole request timeout (2 s); a loaded host's own lag stays
    # well below 1.2 s
    assert max(lags) < 1.2, f"the event loop stalled {max(lags):.2f} s"


async def test_a_schema_payload_is_decoded_once_its_writer_schema_is_known() -> None:
    with registry_stub() as stub:
        stub.responses[("GET", "/schemas/ids/")] = (200, {"schema": ORDER_V1})
        binding = schemas.avro(schemas.Registry(stub.url), ORDER_V1)
        app = App("inmem://unused")
        handled: list[Any] = []

        @app.subscriber("orders", "s")
        async def handle(order: Annotated[dict[str, Any], binding]) -> None:
            handled.append(order)

        async with app.testing(virtual_time=False) as test:
            await test.publish("orders", OutboundMessage(b"\x00\x00\x00\x00\x07\x02\x02a\x02"))
            await test.until(lambda: test.settled() == ["acked"], 10)
    assert handled == [ORDER]
