"""A FastAPI service around a ``broker.App``: HTTP requests publish, the app's subscriber handles them.

``POST /orders`` publishes the order (typed JSON) to ``orders`` through the app's shared publisher and
answers 202; the subscriber ``fulfil`` consumes it through subscription ``fulfilment``. FastAPI's
``lifespan=`` is the app's lifespan: the server's startup connects the backends and starts the
subscribers; its shutdown (SIGTERM to uvicorn) drains them (handlers running finish, the rest is
nacked for redelivery) before the process exits. uvicorn keeps its own signal handlers: the app's
lifespan installs none.

``FULFIL_SECONDS`` (the app's own setting, from the environment; default 0) is how long fulfilling
takes. Serve it (``tests/integration/test_fastapi_app.py`` does, through a real uvicorn)::

    POLYBROKER_URL=nats://127.0.0.1:4222 uvicorn --app-dir examples fastapi_app:api
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import fastapi
import pydantic

import broker
from broker import typed

__all__ = ["Order", "api", "app", "fulfil"]

#: Seconds one order takes to fulfil (the app's own setting).
FULFIL_SECONDS = float(os.environ.get("FULFIL_SECONDS", "0"))


class Order(pydantic.BaseModel):
    """An order placed over HTTP."""

    id: int
    item: str


app = broker.App(os.environ.get("POLYBROKER_URL", "inmem://fastapi-demo"))


@app.subscriber("orders", "fulfilment", concurrency=4)
async def fulfil(order: Order) -> None:
    """Handle an order (a real service would reserve stock, bill, ship); acked on return."""
    print(f"fulfilling {order.id} {order.item}", flush=True)
    await asyncio.sleep(FULFIL_SECONDS)
    print(f"fulfilled {order.id} {order.item}", flush=True)


@asynccontextmanager
async def lifespan(_: fastapi.FastAPI) -> AsyncIterator[None]:
    """The app's lifespan as FastAPI's: subscribers run while the server serves, drained at shutdown."""
    async with app.lifespan(drain_timeout=30):
        yield


api = fastapi.FastAPI(title="orders", lifespan=lifespan)


@api.post("/orders", status_code=202)
async def place(order: Order) -> dict[str, int]:
    """Publish the order to ``orders`` (returns once the broker has it)."""
    await typed.topic(app.publisher(), "orders", Order).publish(order, key=str(order.id))
    return {"accepted": order.id}
