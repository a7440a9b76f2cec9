"""The web monitor: JSON API and page over HTTP (built-in server), as an ASGI app, and in Chromium."""

from __future__ import annotations

import asyncio
import json
import math
import uuid
from collections.abc import AsyncIterator, MutableMapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import pytest

import broker.backends.kafka.processor.processor as processor_module
from broker.backends.kafka.processor import Context, Processor, Tester, View, define_group, input, persist
from broker.backends.kafka.processor.monitor import Monitor, MonitorServer, jsonable
from broker.backends.kafka.processor.table import TableStatus
from broker.driver.partitioning import partitioner_by_name
from broker.testing import wait_until
from tests.unit.processor.support import inmem_backend

murmur2 = partitioner_by_name("murmur2")
GROUP = "clicks"
TABLE = "clicks-table"
#: Keys that must survive the trip through a URL path.
ODD_KEYS = ["user/1", "ünï cödé ✓", "a b?c#d&e=f", "%41", "..", ".", "<b onclick=x()>bold</b>"]


def count(ctx: Context, click: str) -> None:
    state = ctx.value() or {"clicks": 0, "pages": []}
    state["clicks"] += 1
    state["pages"].append(click)
    ctx.set_value(state)


graph = define_group(GROUP, input("clicks", "str", count), persist("json"))


@dataclass
class Setup:
    tester: Tester
    processor: Processor
    view: View
    monitor: Monitor


@pytest.fixture
async def setup() -> AsyncIterator[Setup]:
    async with Tester(partitions=3) as tester:
        proc = await tester.processor(graph)
        for key in ["plain", "plain", *ODD_KEYS]:
            await tester.consume("clicks", key, f"/page-of/{key}")
        view = await tester.view(TABLE, "json")
        monitor = Monitor(title="clicks <monitor>")
        assert monitor.add_processor(proc) == GROUP
        assert monitor.add_view(view) == TABLE
        yield Setup(tester, proc, view, monitor)


@pytest.fixture
async def server(setup: Setup) -> AsyncIterator[MonitorServer]:
    async with await setup.monitor.serve(host="127.0.0.1", port=0) as server:
        yield server


@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        assert self.headers["content-type"] == "application/json", self.headers
        return json.loads(self.body)


async def request(server: MonitorServer, method: str, target: str, *, raw: bytes | None = None) -> Reply:
    """One HTTP/1.1 request over a fresh connection (the server closes it after the response)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", server.port)
    try:
        writer.write(raw or f"{method} {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
        await writer.drain()
        data = await asyncio.wait_for(reader.read(), 5)
    finally:
        writer.close()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {}
    for line in lines[1:]:
        name, _, value = line.partition(":")
        headers[name.strip().lower()] = value.strip()
    if method != "HEAD":
        assert int(headers["content-length"]) == len(body)
    return Reply(int(lines[0].split(" ")[1]), headers, body)


def key_path(view: str, key: str) -> str:
    return f"/api/views/{quote(view, safe='')}/keys/{quote(key, safe='')}"


# -- the JSON API over the built-in server ----------------------------------------------------------
async def test_the_api_lists_processors_and_views(setup: Setup, server: MonitorServer) -> None:
    assert server.url == f"http://127.0.0.1:{server.port}/"
    index = (await request(server, "GET", "/api")).json()
    assert index == {"processors": [GROUP], "views": [TABLE]}

    reply = await request(server, "GET", "/api/processors")
    assert reply.status == 200 and reply.headers["cache-control"] == "no-store"
    (proc,) = reply.json()["processors"]
    assert proc["name"] == proc["group"] == GROUP
    assert proc["state"] == "running" and proc["recovered"] is True and proc["error"] is None
    assert proc["graph"]["inputs"] == ["clicks"] and proc["graph"]["table"] == TABLE
    assert [p["partition"] for p in proc["partitions"]] == [0, 1, 2]
    assert {p["role"] for p in proc["partitions"]} == {"active"}
    assert sum(p["inputs"]["clicks"]["count"] for p in proc["partitions"]) == 2 + len(ODD_KEYS)
    assert proc["lag"] == 0
    for part in proc["partitions"]:
        assert part["table"]["status"] == "running"
        assert part["table"]["recovery"]["progress"] == 1.0
    assert proc["stats_error"] is None

    one = (await request(server, "GET", f"/api/processors/{GROUP}")).json()
    assert one["partitions"] == proc["partitions"]

    (view,) = (await request(server, "GET", "/api/views")).json()["views"]
    assert view["name"] == view["table"] == TABLE
    assert view["state"] == "running" and view["recovered"] is True
    assert [p["partition"] for p in view["partitions"]] == [0, 1, 2]
    assert view["recovery"]["progress"] == 1.0 and view["recovery"]["remaining"] == 0
    assert (await request(server, "GET", f"/api/views/{TABLE}/")).json()["name"] == TABLE


async def test_lag_shows_input_not_processed_yet(setup: Setup, server: MonitorServer) -> None:
    await setup.tester.log.produce("clicks", b"/late", key="late", partition=1)
    await setup.tester.log.produce("clicks", b"/later", key="late", partition=1)
    proc = (await request(server, "GET", f"/api/processors/{GROUP}")).json()
    lags = {p["partition"]: p["lag"] for p in proc["partitions"]}
    assert lags == {0: 0, 1: 2, 2: 0} and proc["lag"] == 2
    await setup.tester.settle()
    assert (await request(server, "GET", f"/api/processors/{GROUP}")).json()["lag"] == 0


async def test_a_key_of_a_view_is_looked_up(setup: Setup, server: MonitorServer) -> None:
    reply = await request(server, "GET", key_path(TABLE, "plain"))
    assert reply.status == 200
    body = reply.json()
    assert body["value"] == {"clicks": 2, "pages": ["/page-of/plain", "/page-of/plain"]}
    assert body["exact"] is True and body["key"] == "plain" and body["view"] == TABLE
    assert body["partition"] == setup.view.partition_of("plain")


@pytest.mark.parametrize("key", ODD_KEYS)
async def test_odd_keys_travel_percent_encoded(setup: Setup, server: MonitorServer, key: str) -> None:
    expected = {"clicks": 1, "pages": [f"/page-of/{key}"]}
    by_query = await request(server, "GET", f"/api/views/{TABLE}/value?key={quote(key, safe='')}")
    assert by_query.status == 200 and by_query.json()["value"] == expected
    assert by_query.json()["key"] == key
    if key not in (".", ".."):  # dot segments are for ?key= (clients normalise them away)
        by_path = await request(server, "GET", key_path(TABLE, key))
        assert by_path.status == 200 and by_path.json()["value"] == expected
    by_processor = await request(server, "GET", f"/api/processors/{GROUP}/keys/{quote(key, safe='')}")
    assert by_processor.status == 200 and by_processor.json()["value"] == expected


async def test_error_statuses(server: MonitorServer) -> None:
    missing = await request(server, "GET", key_path(TABLE, "nobody"))
    assert missing.status == 404 and "nobody" in missing.json()["error"]
    assert missing.json()["status"] == 404
    assert (await request(server, "GET", f"/api/views/{TABLE}/value?key=nobody")).status == 404
    assert (await request(server, "GET", f"/api/views/{TABLE}/value")).status == 400
    unknown = await request(server, "GET", key_path("no-such-view", "plain"))
    assert unknown.status == 404 and "no-such-view" in unknown.json()["error"]
    assert (await request(server, "GET", "/api/views/no-such-view")).status == 404
    assert (await request(server, "GET", "/api/processors/nope")).status == 404
    assert (await request(server, "GET", f"/api/processors/{GROUP}/keys/nobody")).status == 404
    assert (await request(server, "GET", "/nothing/here")).status == 404
    assert (await request(server, "GET", f"/api/views/{TABLE}/keys/a/b")).status == 404  # "/" unencoded
    for method in ("POST", "PUT", "DELETE", "PATCH", "OPTIONS"):
        reply = await request(server, method, key_path(TABLE, "plain"))
        assert reply.status == 405, method
        assert reply.headers["allow"] == "GET, HEAD" and reply.json()["status"] == 405
    posted = b"POST /api HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + b"x" * 5000
    assert (await request(server, "POST", "/api", raw=posted)).status == 405
    chunked = b"POST /api HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n"
    assert (await request(server, "POST", "/api", raw=chunked)).status == 413
    assert (await request(server, "GET", "/api/views/%FF%FE/keys/x")).status == 400  # not UTF-8
    assert (await request(server, "GET", "/", raw=b"NONSENSE\r\n\r\n")).status == 400
    assert (await request(server, "GET", "/", raw=b"GET nothing HTTP/1.1\r\n\r\n")).status == 400
    huge = b"GET /" + b"a" * 70_000 + b" HTTP/1.1\r\n\r\n"
    assert (await request(server, "GET", "/", raw=huge)).status == 431
    # The server still answers after all that.
    assert (await request(server, "GET", key_path(TABLE, "plain"))).status == 200


async def test_head_has_the_headers_and_no_body(server: MonitorServer) -> None:
    reply = await request(server, "HEAD", key_path(TABLE, "plain"))
    assert reply.status == 200 and reply.body == b"" and int(reply.headers["content-length"]) > 0
    assert reply.headers["content-type"] == "application/json"


async def test_listing_keys(setup: Setup, server: MonitorServer) -> None:
    everything = (await request(server, "GET", f"/api/views/{TABLE}/keys")).json()
    assert everything["keys"] == sorted(["plain", *ODD_KEYS]) and everything["more"] is False
    two = (await request(server, "GET", f"/api/views/{TABLE}/keys?limit=2")).json()
    assert two["keys"] == sorted(["plain", *ODD_KEYS])[:2] and two["more"] is True
    prefixed = (await request(server, "GET", f"/api/views/{TABLE}/keys?prefix={quote('ü')}")).json()
    assert prefixed["keys"] == ["ünï cödé ✓"]
    started = (await request(server, "GET", f"/api/views/{TABLE}/keys?start=p")).json()
    assert started["keys"] == [k for k in sorted(["plain", *ODD_KEYS]) if k >= "p"]
    for bad in ("0", "-1", "abc", "1001"):
        reply = await request(server, "GET", f"/api/views/{TABLE}/keys?limit={bad}")
        assert reply.status == 400, bad


async def test_the_page_is_static_and_locked_down(server: MonitorServer) -> None:
    reply = await request(server, "GET", "/")
    assert reply.status == 200 and reply.headers["content-type"] == "text/html; charset=utf-8"
    policy = reply.headers["content-security-policy"]
    assert "default-src 'none'" in policy and "script-src 'sha256-" in policy
    html = reply.body.decode()
    assert "<title>clicks &lt;monitor&gt;</title>" in html and "clicks <monitor>" not in html
    assert 'id="query"' in html and TABLE not in html  # data comes from the API, never the markup


async def test_close_is_idempotent_and_stops_listening(setup: Setup) -> None:
    server = await setup.monitor.serve()
    waiter = asyncio.ensure_future(server.serve_forever())
    assert (await request(server, "GET", "/api")).status == 200
    await server.close()
    await server.close()
    await asyncio.wait_for(waiter, 5)
    with pytest.raises(OSError):
        await asyncio.open_connection("127.0.0.1", server.port)
    assert "closed" in repr(server)


# -- values that are not plain JSON ---------------------------------------------------------------
def test_jsonable_keeps_json_and_reprs_the_rest() -> None:
    assert jsonable({"a": [1, 2.5, None, True, "x", (3, 4)]}) == (
        {"a": [1, 2.5, None, True, "x", [3, 4]]},
        True,
    )
    assert jsonable({1: "one", None: 0, False: 1}) == ({"1": "one", "null": 0, "false": 1}, True)
    assert jsonable(b"\x00raw") == ("b'\\x00raw'", False)
    assert jsonable({"s": {3}}) == ({"s": "{3}"}, False)
    assert jsonable(math.nan) == ("nan", False)
    assert jsonable({(1, 2): "tuple key"}) == ({"(1, 2)": "tuple key"}, False)

    class Broken:
        def __repr__(self) -> str:
            raise RuntimeError("no repr")

    assert jsonable([Broken()]) == (["<unrepresentable Broken>"], False)
    deep: list[Any] = []
    deep.append(deep)  # a cycle: cut by the depth limit
    value, exact = jsonable(deep)
    assert exact is False and json.dumps(value)


class OddCodec:
    """Decodes to values JSON cannot carry, or fails on ``b"boom"``."""

    def encode(self, value: Any) -> bytes:
        return value if isinstance(value, bytes) else repr(value).encode()

    def decode(self, data: bytes) -> Any:
        if data == b"boom":
            raise ValueError("cannot decode boom")
        return {"raw": data, "tags": frozenset({"x"}), "ratio": math.inf}


async def test_odd_values_never_break_the_server(setup: Setup) -> None:
    await setup.tester.log.create_topic("odd", 1, config={"cleanup.policy": "compact"})
    await setup.tester.log.produce("odd", b"fine", key="fine", partition=0)
    await setup.tester.log.produce("odd", b"boom", key="boom", partition=0)
    view = View(setup.tester.log, "odd", OddCodec())
    async with view:
        await view.wait_running(5)
        setup.monitor.add_view(view)
        async with await setup.monitor.serve() as server:
            fine = (await request(server, "GET", key_path("odd", "fine"))).json()
            assert fine["exact"] is False
            assert fine["value"] == {"raw": "b'fine'", "tags": "frozenset({'x'})", "ratio": "inf"}
            boom = await request(server, "GET", key_path("odd", "boom"))
            assert boom.status == 500 and "cannot decode boom" in boom.json()["error"]
            listing = await request(server, "GET", "/api/views/odd/keys")
            assert listing.status == 500  # the listing decodes values too (codec errors surface)
            assert (await request(server, "GET", key_path(TABLE, "plain"))).status == 200


async def test_a_view_not_readable_yet_is_503(setup: Setup) -> None:
    idle = View(setup.tester.log, TABLE, "json")
    setup.monitor.add_view(idle, "idle")
    async with await setup.monitor.serve() as server:
        reply = await request(server, "GET", key_path("idle", "plain"))
        assert reply.status == 503 and "TableNotReady" in reply.json()["error"]
        view = (await request(server, "GET", "/api/views/idle")).json()
        assert view["state"] == "idle" and view["recovered"] is False and view["partitions"] == []
        assert view["recovery"]["progress"] is None


def test_registering_names(setup: Setup) -> None:
    monitor = setup.monitor
    monitor.add_view(setup.view)  # the same view again: fine
    with pytest.raises(ValueError, match="different view"):
        monitor.add_view(View(setup.tester.log, TABLE, "json"))
    with pytest.raises(ValueError, match="non-empty"):
        monitor.add_processor(setup.processor, "")
    assert monitor.add_view(setup.view, "again") == "again"
    assert set(monitor.views) == {TABLE, "again"} and set(monitor.processors) == {GROUP}
    monitor.remove("again")
    assert set(monitor.views) == {TABLE}
    assert "Monitor" in repr(monitor)


# -- recovery progress of a processor -------------------------------------------------------------
async def test_partitions_being_recovered_show_their_progress(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = inmem_backend()
    async with backend:
        log = backend.log()
        await log.create_topic("clicks", 2)
        await log.create_topic(TABLE, 2, config={"cleanup.policy": "compact"})
        for i in range(5):
            key = f"k{i}"
            await log.produce(
                TABLE, json.dumps({"clicks": i}).encode(), key=key, partition=murmur2(key.encode(), 2)
            )
        release = asyncio.Event()
        real_recover = processor_module.recover  # type: ignore[attr-defined]

        async def slow_recover(log_port: Any, tables: Any, **kwargs: Any) -> None:
            for table in tables:
                table.status = TableStatus.RECOVERING
                table.recovery.started = 1.0
                table.recovery.hwm = 4
                table.recovery.offset = 1
            await release.wait()
            await real_recover(log_port, tables, **kwargs)

        monkeypatch.setattr(processor_module, "recover", slow_recover)
        proc = Processor(log, graph, poll_timeout=0.02)
        monitor = Monitor()
        monitor.add_processor(proc)
        proc.start()
        try:
            await wait_until(lambda: bool(proc.recovering_stats()), 5)
            status = await monitor.processor_status(GROUP)
            assert status["recovered"] is False
            assert [(p["partition"], p["role"]) for p in status["partitions"]] == [
                (0, "recovering"),
                (1, "recovering"),
            ]
            recovery = status["partitions"][0]["table"]["recovery"]
            assert recovery["progress"] == 0.25 and recovery["remaining"] == 3
            release.set()
            await proc.wait_ready(5)
            assert proc.recovering_stats() == {} and proc.standby_stats() == {}
            status = await monitor.processor_status(GROUP)
            assert [(p["partition"], p["role"]) for p in status["partitions"]] == [
                (0, "active"),
                (1, "active"),
            ]
            assert all(p["table"]["recovery"]["progress"] == 1.0 for p in status["partitions"])
        finally:
            release.set()
            await proc.stop(5)


async def test_hot_standby_partitions_are_shown() -> None:
    backend = inmem_backend()
    async with backend:
        log = backend.log()
        await log.create_topic("clicks", 2)
        one = Processor(log, graph, hot_standby=True, poll_timeout=0.02)
        two = Processor(log, graph, hot_standby=True, poll_timeout=0.02)
        monitor = Monitor()
        monitor.add_processor(one, "one")
        monitor.add_processor(two, "two")
        async with one, two:
            await wait_until(lambda: len(one.partitions) == 1 and len(two.partitions) == 1, 5)
            await wait_until(lambda: bool(one.standby_stats()), 5)
            status = await monitor.processor_status("one")
            roles = {p["partition"]: p["role"] for p in status["partitions"]}
            (owned,) = one.partitions
            assert roles == {owned: "active", 1 - owned: "standby"}
            standby = next(p for p in status["partitions"] if p["role"] == "standby")
            assert standby["table"] is not None and standby["inputs"] == {}
            assert set(one.standby_stats()) == {1 - owned}
            assert set(one.standby_stats()[1 - owned]) == {TABLE}


# -- the ASGI app, called directly ------------------------------------------------------------------
async def call_asgi(app: Monitor, scope: dict[str, Any]) -> tuple[int, dict[str, str], bytes]:
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app({"type": "http", "method": "GET", "query_string": b"", "headers": [], **scope}, receive, send)
    start, body = sent
    assert start["type"] == "http.response.start" and body["type"] == "http.response.body"
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, body["body"]


async def test_asgi_app_answers_directly(setup: Setup) -> None:
    app = setup.monitor
    status, headers, body = await call_asgi(app, {"path": "/api/views"})
    assert status == 200 and headers["content-type"] == "application/json"
    assert json.loads(body)["views"][0]["name"] == TABLE
    # raw_path keeps %2F: the key "user/1" is one segment.
    status, _, body = await call_asgi(
        app, {"path": f"/api/views/{TABLE}/keys/user/1", "raw_path": key_path(TABLE, "user/1").encode()}
    )
    assert status == 200 and json.loads(body)["key"] == "user/1"
    status, _, _ = await call_asgi(app, {"path": key_path(TABLE, "plain"), "method": "POST"})
    assert status == 405
    status, _, body = await call_asgi(app, {"path": f"/api/views/{TABLE}/keys", "query_string": b"limit=1"})
    assert status == 200 and len(json.loads(body)["keys"]) == 1
    status, headers, body = await call_asgi(app, {"path": "/"})
    assert status == 200 and headers["content-type"].startswith("text/html") and b"<form" in body


@pytest.mark.parametrize("path_has_root", [True, False])
async def test_asgi_app_mounted_under_a_prefix(setup: Setup, path_has_root: bool) -> None:
    key = "ünï cödé ✓"
    inner = key_path(TABLE, key)
    path = "/ops/monitor" + inner if path_has_root else inner
    scope = {"path": path.replace("%2F", "/"), "raw_path": path.encode(), "root_path": "/ops/monitor"}
    status, _, body = await call_asgi(setup.monitor, scope)
    assert status == 200 and json.loads(body)["key"] == key
    status, _, _ = await call_asgi(
        setup.monitor, {**scope, "path": "/ops/monitor/", "raw_path": b"/ops/monitor/"}
    )
    assert status == 200


async def test_asgi_lifespan_and_websocket(setup: Setup) -> None:
    messages = [{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}]
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        return messages.pop(0)

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await setup.monitor({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == ["lifespan.startup.complete", "lifespan.shutdown.complete"]
    sent.clear()
    await setup.monitor({"type": "websocket", "path": "/"}, receive, send)
    assert sent == [{"type": "websocket.close", "code": 1003}]


# -- the page in a real browser -------------------------------------------------------------------
WAIT_MS = 15_000


@pytest.mark.timeout(60)
async def test_the_page_looks_up_a_key_in_chromium(setup: Setup, server: MonitorServer) -> None:
    from tests.browser import headless_chromium

    async with headless_chromium() as browser:
        page = await browser.new_page()
        errors: list[str] = []
        page.on("pageerror", lambda exc: errors.append(str(exc)))
        page.on("console", lambda msg: errors.append(msg.text) if msg.type == "error" else None)
        response = await page.goto(server.url, wait_until="load", timeout=WAIT_MS)
        assert response is not None and response.ok
        # The monitor part: the refresh filled in the processor and the view.
        await page.locator("#views td", has_text=TABLE).first.wait_for(timeout=WAIT_MS)
        await page.locator("#processors h3", has_text=GROUP).first.wait_for(timeout=WAIT_MS)
        # The query form: a key with a slash and Unicode.
        await page.fill("#view", TABLE)
        await page.fill("#key", "user/1")
        await page.click("#lookup")
        await page.locator('#result[data-state="found"]').wait_for(timeout=WAIT_MS)
        shown = json.loads(await page.locator("#result").inner_text())
        assert shown == {"clicks": 1, "pages": ["/page-of/user/1"]}
        assert not errors, f"errors in the page: {errors}"
        # Listing keys by prefix; a key that looks like markup stays text.
        await page.fill("#key", "<")
        await page.click("#list")
        button = page.locator("#keys button").first
        await button.wait_for(timeout=WAIT_MS)
        assert await button.inner_text() == "<b onclick=x()>bold</b>"
        assert await page.locator("#keys b").count() == 0
        await button.click()
        await page.locator("#result-status", has_text="bold").wait_for(timeout=WAIT_MS)
        assert json.loads(await page.locator("#result").inner_text())["clicks"] == 1
        await page.fill("#key", "nobody")
        await page.click("#lookup")
        await page.locator('#result[data-state="missing"]').wait_for(timeout=WAIT_MS)
        assert "404" in await page.locator("#result-status").inner_text()


# -- the example ------------------------------------------------------------------------------------
async def test_the_example_serves_its_processors_and_view() -> None:
    from tests.unit.processor.test_examples import load

    example = load("processor_monitor")
    seen: dict[str, Any] = {}

    async def look(server: MonitorServer) -> None:
        seen["index"] = (await request(server, "GET", "/api")).json()
        async with asyncio.timeout(10):  # table writes reach the view at the next checkpoint
            while not (keys := (await request(server, "GET", "/api/views/users/keys")).json()["keys"]):  # noqa: ASYNC110
                await asyncio.sleep(0.05)
        seen["value"] = (await request(server, "GET", f"/api/views/users/keys/{keys[0]}")).json()["value"]

    await example.run(f"inmem://monitor-{uuid.uuid4().hex}", 0, 0.01, 3, 0.1, look)
    assert seen["index"] == {"processors": ["clicks-monitored", "click-totals"], "views": ["users"]}
    assert seen["value"]["clicks"] >= 1
