"""goka's "monitoring" example: a processor and a view behind the web monitor and query page.

* an emitter sends a click for a random user to ``user-clicks`` every ``--interval`` seconds;
* the ``clicks-monitored`` processor counts clicks per user in its group table (JSON), and a
  second processor, ``click-totals``, counts all clicks under one key;
* a view of ``clicks-monitored-table`` serves the counts;
* one :class:`Monitor` shows both processors (state, partitions, recovery, lag) and the view,
  and its page looks up a user's count: open the printed address and query ``user-3``.

    python examples/processor_monitor.py                  # then open http://127.0.0.1:9096/
    python examples/processor_monitor.py --url kafka://127.0.0.1:9092 --port 0

Runs until interrupted (or for ``--duration`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import random
from collections.abc import Awaitable, Callable

import broker
from broker.backends.kafka.processor import Context, Emitter, Processor, View, define_group, input, persist
from broker.backends.kafka.processor.monitor import Monitor, MonitorServer
from broker.log import Log

TOPIC = "user-clicks"


def per_user(ctx: Context, click: str) -> None:
    """One more click for the user in the message key."""
    state = ctx.value() or {"clicks": 0}
    state["clicks"] += 1
    state["last_page"] = click
    ctx.set_value(state)


def total(ctx: Context, click: str) -> None:
    """One more click in all (every key counts on its own partition's row)."""
    ctx.set_value((ctx.value() or 0) + 1)


users = define_group("clicks-monitored", input(TOPIC, "str", per_user), persist("json"))
totals = define_group("click-totals", input(TOPIC, "str", total), persist("int64"))


async def emit_clicks(log: Log, interval: float, count: int) -> None:
    """Send a click for a random user every ``interval`` seconds."""
    async with Emitter(log, TOPIC, "str") as emitter:
        while True:
            user = f"user-{random.randrange(count)}"
            await emitter.emit_sync(user, f"/page/{random.randrange(5)}")
            await asyncio.sleep(interval)


async def run(
    url: str,
    port: int,
    interval: float,
    count: int,
    duration: float | None,
    on_serving: Callable[[MonitorServer], Awaitable[None]] | None = None,
) -> None:
    """Everything together until ``duration`` passes (None: forever).

    ``on_serving(server)`` is awaited once the monitor serves (the example's test looks around).
    """
    backend = broker.connect(url)
    async with backend:
        log = backend.log()
        await log.create_topic(TOPIC, 4)
        async with (
            Processor(log, users) as counting,
            Processor(log, totals) as summing,
            View(log, users.table_topic, "json") as view,
        ):
            await view.wait_running(30)
            monitor = Monitor(title="clicks, monitored")
            monitor.add_processor(counting)
            monitor.add_processor(summing)
            monitor.add_view(view, "users")
            clicks = asyncio.create_task(emit_clicks(log, interval, count))
            try:
                async with await monitor.serve(host="127.0.0.1", port=port) as server:
                    print(f"monitor on {server.url} (a user: {server.url}api/views/users/keys/user-0)")
                    if on_serving is not None:
                        await on_serving(server)
                    await asyncio.sleep(duration if duration is not None else float("inf"))
            finally:
                clicks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await clicks


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(description="processors and a view behind the web monitor")
    parser.add_argument("--url", default="inmem://clicks-monitored")
    parser.add_argument("--port", type=int, default=9096, help="0: any free port")
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between clicks")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.url, args.port, args.interval, args.users, args.duration))


if __name__ == "__main__":
    main()
