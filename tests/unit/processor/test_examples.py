"""The examples run: word count end to end, clicks served over HTTP (in-memory broker)."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import uuid
from pathlib import Path
from types import ModuleType

from broker.backends.kafka.processor import Tester, View

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"


def load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_wordcount() -> None:
    wordcount = load("wordcount")
    counts = await wordcount.run(f"inmem://wc-{uuid.uuid4().hex}", 2)
    assert counts["it"] == 10 and counts["despair"] == 1 and counts["times"] == 2


async def get(port: int, path: str) -> tuple[str, object]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
    await writer.drain()
    response = await reader.read()
    writer.close()
    head, body = response.split(b"\r\n\r\n", 1)
    return head.split(b"\r\n")[0].decode(), json.loads(body)


async def test_clicks_counts_per_user_and_serves_the_view() -> None:
    clicks = load("clicks")
    async with Tester(partitions=2) as tester:
        await tester.processor(clicks.graph)
        for user in ["user-1", "user-2", "user-1"]:
            await tester.consume(clicks.TOPIC, user, "some-click")
        assert tester.table_value("mini-group-table", "user-1")["clicks"] == 2
        view: View = await tester.view("mini-group-table", "json")
        server = await clicks.serve(view, 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            status, body = await get(port, "/user-1")
            assert status == "HTTP/1.1 200 OK" and body["clicks"] == 2  # type: ignore[index]
            status, body = await get(port, "/")
            assert isinstance(body, dict) and set(body) == {"user-1", "user-2"}
            status, _ = await get(port, "/user-9")
            assert status == "HTTP/1.1 404 Not Found"


async def test_clicks_runs_for_a_while() -> None:
    clicks = load("clicks")
    await clicks.run(f"inmem://clicks-{uuid.uuid4().hex}", 0, 0.01, 3, 0.3)
