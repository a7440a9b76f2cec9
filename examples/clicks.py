"""goka's "clicks" example: count clicks per user, serve the counts over HTTP from a view.

* an emitter sends a click for a random user to ``user-clicks`` every ``--interval`` seconds;
* the ``mini-group`` processor keeps, per user, ``{"clicks": n, "last_click": time}`` in its
  group table (JSON);
* a view of ``mini-group-table`` answers ``GET /<user>`` (one user's state) and ``GET /`` (all
  users) on ``--port`` — a small HTTP/1.1 server on asyncio streams, no framework.

    python examples/clicks.py --port 9095           # then: curl localhost:9095/user-3
    python examples/clicks.py --url kafka://127.0.0.1:9092

Runs until interrupted (or for ``--duration`` seconds).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import time
from typing import Any

import broker
from broker.backends.kafka.processor import Context, Emitter, Processor, View, define_group, input, persist
from broker.log import Log

TOPIC = "user-clicks"
GROUP = "mini-group"


def process(ctx: Context, msg: str) -> None:
    """One more click for the user in the message key."""
    state = ctx.value() or {"clicks": 0}
    state["clicks"] += 1
    state["last_click"] = ctx.timestamp or time.time()
    ctx.set_value(state)


graph = define_group(GROUP, input(TOPIC, "str", process), persist("json"))


async def emit_clicks(log: Log, interval: float, users: int) -> None:
    """Send a click for a random user every ``interval`` seconds."""
    async with Emitter(log, TOPIC, "str") as emitter:
        while True:
            await emitter.emit_sync(f"user-{random.randrange(users)}", "some-click")
            await asyncio.sleep(interval)


def http_response(status: str, body: Any) -> bytes:
    """A complete HTTP/1.1 response with a JSON body."""
    payload = json.dumps(body, indent=2).encode()
    head = f"HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {len(payload)}\r\n"
    return head.encode() + b"Connection: close\r\n\r\n" + payload


def answer(view: View, path: str) -> bytes:
    """The response for ``GET path``."""
    key = path.strip("/")
    if not key:
        return http_response("200 OK", dict(view.iterate()))
    value = view.get(key)
    if value is None:
        return http_response("404 Not Found", {"error": f"{key} has no clicks"})
    return http_response("200 OK", value)


async def serve(view: View, port: int) -> asyncio.Server:
    """Serve ``view`` over HTTP on ``port`` (0: any free port)."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            request = await reader.readuntil(b"\r\n\r\n")
            method, path, _ = request.split(b"\r\n", 1)[0].decode("latin-1").split(" ", 2)
            if method != "GET":
                writer.write(http_response("405 Method Not Allowed", {"error": "GET only"}))
            else:
                writer.write(answer(view, path))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ValueError):
            writer.write(http_response("400 Bad Request", {"error": "bad request"}))
        finally:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()

    return await asyncio.start_server(handle, "127.0.0.1", port)


async def run(url: str, port: int, interval: float, users: int, duration: float | None) -> None:
    """Emitter, processor, view and HTTP server together until ``duration`` passes (None: forever)."""
    backend = broker.connect(url)
    async with backend:
        log = backend.log()
        await log.create_topic(TOPIC, 4)
        async with Processor(log, graph), View(log, graph.table_topic, "json") as view:
            await view.wait_running(30)
            server = await serve(view, port)
            address = server.sockets[0].getsockname()
            print(f"serving http://{address[0]}:{address[1]}/user-0 (all users: /)", flush=True)
            clicks = asyncio.create_task(emit_clicks(log, interval, users))
            try:
                async with server:
                    await asyncio.sleep(duration if duration is not None else float("inf"))
            finally:
                clicks.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await clicks


def main() -> None:
    """Parse the command line and run."""
    parser = argparse.ArgumentParser(description="count clicks per user and serve them over HTTP")
    parser.add_argument("--url", default="inmem://clicks")
    parser.add_argument("--port", type=int, default=9095)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between clicks")
    parser.add_argument("--users", type=int, default=10)
    parser.add_argument("--duration", type=float, default=None, help="stop after this many seconds")
    args = parser.parse_args()
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(run(args.url, args.port, args.interval, args.users, args.duration))


if __name__ == "__main__":
    main()
