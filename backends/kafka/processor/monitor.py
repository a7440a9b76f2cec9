"""A web monitor and query page for processors and views (goka's ``web/monitor`` and ``web/query``).

A :class:`Monitor` holds the processors and views an application registers and answers HTTP
for them: a JSON API and one plain HTML page that shows it (refreshed every two seconds) and
looks up keys of views. It is an ASGI 3 application, so any ASGI server or framework can mount
it (``app.mount("/monitor", monitor)`` in Starlette or FastAPI), and it carries a small HTTP/1.1
server of its own on asyncio streams for applications with no web framework::

    monitor = Monitor()
    monitor.add_processor(processor)
    monitor.add_view(view)
    async with await monitor.serve(port=9095) as server:
        print("open", server.url)
        await server.serve_forever()

Routes (``GET`` and ``HEAD``; any other method is ``405``, any other path ``404``):

* ``/``: the HTML page.
* ``/api``: the names of the registered processors and views.
* ``/api/processors``, ``/api/processors/<name>``: state, partitions (owned, recovering, hot
  standby) with their group table and joined tables' status and recovery progress, input
  counts and lag, output counts, lookup views.
* ``/api/processors/<name>/keys/<key>``: a key of the processor's own group table (only keys
  in partitions this instance owns).
* ``/api/views``, ``/api/views/<name>``: state, recovered, partitions with recovery progress.
* ``/api/views/<name>/keys/<key>`` (or ``/api/views/<name>/value?key=<key>``, which also takes
  keys such as ``""`` or ``..`` that a path cannot carry): the key's value, decoded by the
  view's codec; ``404`` when the key has no value.
* ``/api/views/<name>/keys?limit=&prefix=&start=``: keys in order (at most ``limit``, 100 by
  default, 1000 at most), with ``more`` telling whether there are further keys.

Path segments are percent-decoded one by one, so a key may contain ``/`` (as ``%2F``) and any
Unicode (UTF-8, percent-encoded). A value is returned as JSON when it is made of JSON types
(dicts with string keys, lists, tuples, strings, numbers, booleans, ``None``); anything else in
it (bytes, sets, dataclasses, NaN, ...) is shown as its ``repr()`` and ``"exact"`` is ``false``.
A value that cannot be read (a codec error) gives ``500`` with the error; a view that is not
readable yet gives ``503``. Errors are ``{"error": "...", "status": n}``.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import http
import json
import logging
import math
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, MutableMapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs, unquote, unquote_to_bytes

from broker.backends.kafka.processor.errors import NotOwned, ProcessorError, TableNotReady
from broker.backends.kafka.processor.monitor_page import SCRIPT, STYLE, page
from broker.backends.kafka.processor.processor import Processor
from broker.backends.kafka.processor.stats import InputStats, PartitionStats, ProcessorStats, TableStats
from broker.backends.kafka.processor.table import RecoveryStats
from broker.backends.kafka.processor.view import View
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError

__all__ = ["ASGIReceive", "ASGIScope", "ASGISend", "Monitor", "MonitorServer", "jsonable"]

log = logging.getLogger("broker.backends.kafka.processor.monitor")

#: An ASGI connection scope.
ASGIScope = MutableMapping[str, Any]
#: The ASGI ``receive`` callable.
ASGIReceive = Callable[[], Awaitable[MutableMapping[str, Any]]]
#: The ASGI ``send`` callable.
ASGISend = Callable[[MutableMapping[str, Any]], Awaitable[None]]

_METHODS = ("GET", "HEAD")
_MAX_DEPTH = 64
_JSON = "application/json"
#: The largest request body the built-in server reads (and drops) before answering.
_MAX_BODY = 64 * 1024


def _sha256(text: str) -> str:
    return "'sha256-" + base64.b64encode(hashlib.sha256(text.encode()).digest()).decode() + "'"


#: The page may run its own script and style and talk to its own origin; nothing else.
_PAGE_POLICY = (
    f"default-src 'none'; script-src {_sha256(SCRIPT)}; style-src {_sha256(STYLE)}; "
    "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
)


# -- values as JSON -----------------------------------------------------------------------------
def _repr(value: Any) -> str:
    try:
        return repr(value)
    except Exception:
        return f"<unrepresentable {type(value).__name__}>"


def jsonable(value: Any) -> tuple[Any, bool]:
    """``value`` made of JSON types only, and whether that was exact.

    Dicts, lists, tuples (as lists), strings, integers, finite floats, booleans and ``None``
    stay as they are (dict keys that are numbers, booleans or ``None`` become strings, as
    ``json`` does). Anything else, at any depth (bytes, sets, objects, NaN, infinities, nesting
    deeper than 64), is replaced by its ``repr()`` and the second item is ``False``.
    """
    exact = True

    def key_of(key: Any) -> str:
        nonlocal exact
        if isinstance(key, str):
            return key
        if key is None or isinstance(key, bool | int) or (isinstance(key, float) and math.isfinite(key)):
            return json.dumps(key)
        exact = False
        return _repr(key)

    def convert(item: Any, depth: int) -> Any:
        nonlocal exact
        if item is None or isinstance(item, bool):
            return item
        if isinstance(item, str):
            return str(item)
        if isinstance(item, int):
            return int(item)
        if isinstance(item, float) and math.isfinite(item):
            return float(item)
        if depth < _MAX_DEPTH:
            if isinstance(item, dict):
                return {key_of(k): convert(v, depth + 1) for k, v in item.items()}
            if isinstance(item, list | tuple):
                return [convert(v, depth + 1) for v in item]
        exact = False
        return _repr(item)

    return convert(value, 0), exact


def _error_text(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


# -- stats as JSON ------------------------------------------------------------------------------
def _recovery(recovery: RecoveryStats, now: float) -> dict[str, Any]:
    started, finished = recovery.started, recovery.finished
    if started is None:
        fraction: float | None = None
    else:
        total = recovery.hwm - recovery.start_offset
        done = recovery.offset - recovery.start_offset
        fraction = 1.0 if total <= 0 or finished is not None else min(1.0, max(0.0, done / total))
    return {
        "start_offset": recovery.start_offset,
        "offset": recovery.offset,
        "hwm": recovery.hwm,
        "remaining": recovery.remaining,
        "progress": fraction,
        "started": started,
        "finished": finished,
        "seconds": None if started is None else round((finished or now) - started, 3),
    }


def _table(stats: TableStats, now: float) -> dict[str, Any]:
    return {
        "status": stats.status.name.lower(),
        "writes": stats.writes,
        "recovery": _recovery(stats.recovery, now),
    }


def _input(stats: InputStats) -> dict[str, Any]:
    return {"count": stats.count, "bytes": stats.bytes, "last_offset": stats.last_offset, "lag": stats.lag}


def _partition(number: int, role: str, stats: PartitionStats, now: float) -> dict[str, Any]:
    return {
        "partition": number,
        "role": role,
        "lag": sum(s.lag for s in stats.inputs.values()),
        "inputs": {topic: _input(s) for topic, s in sorted(stats.inputs.items())},
        "outputs": {
            topic: {"count": s.count, "bytes": s.bytes} for topic, s in sorted(stats.outputs.items())
        },
        "table": None if stats.table is None else _table(stats.table, now),
        "joins": {topic: _table(s, now) for topic, s in sorted(stats.joins.items())},
    }


def _overall(tables: Iterable[TableStats], now: float) -> dict[str, Any]:
    """Recovery of several partitions summed up (``progress`` is ``None`` until all started)."""
    merged = RecoveryStats(finished=now)
    started: list[float] = []
    pending = False
    for stats in tables:
        recovery = stats.recovery
        merged.start_offset += recovery.start_offset
        merged.offset += recovery.offset
        merged.hwm += recovery.hwm
        if recovery.started is None:
            pending = True
        else:
            started.append(recovery.started)
        if recovery.finished is None:
            merged.finished = None
    merged.started = None if pending or not started else min(started)
    if merged.started is None:
        merged.finished = None
    return _recovery(merged, now)


# -- HTTP plumbing ------------------------------------------------------------------------------
class _HTTPError(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(slots=True)
class _Response:
    status: int
    body: bytes
    content_type: str = _JSON
    headers: list[tuple[bytes, bytes]] = field(default_factory=list)


def _json_response(body: Any, status: int = 200) -> _Response:
    return _Response(status, json.dumps(body, ensure_ascii=True, allow_nan=False).encode())


def _error_response(status: int, message: str) -> _Response:
    response = _json_response({"error": message, "status": status}, status)
    if status == 405:
        response.headers.append((b"allow", ", ".join(_METHODS).encode()))
    return response


def _segments(scope: ASGIScope) -> list[str]:
    """The request path inside the app, split at ``/`` and percent-decoded segment by segment."""
    root = str(scope.get("root_path") or "").rstrip("/")
    raw = scope.get("raw_path")
    if isinstance(raw, bytes | bytearray) and raw:
        target = bytes(raw).split(b"?", 1)[0]
        decoded = unquote(target.decode("latin-1"))
        if root and (decoded == root or decoded.startswith(root + "/")):
            depth = root.count("/")  # the wire path carries the mount point: drop its segments
            target = b"/" + b"/".join(target.split(b"/")[depth + 1 :])
        parts = target.split(b"/")[1:]
        try:
            return [unquote_to_bytes(part).decode("utf-8") for part in parts]
        except UnicodeDecodeError:
            raise _HTTPError(400, "the path is not UTF-8 once percent-decoded") from None
    path = str(scope.get("path") or "/")
    if root and (path == root or path.startswith(root + "/")):
        path = path[len(root) :]
    return path.split("/")[1:] if path.startswith("/") else path.split("/")


def _query(scope: ASGIScope) -> dict[str, str]:
    raw = scope.get("query_string") or b""
    try:
        parsed = parse_qs(bytes(raw).decode("latin-1"), keep_blank_values=True, errors="strict")
    except UnicodeDecodeError:
        raise _HTTPError(400, "the query string is not UTF-8 once percent-decoded") from None
    return {name: values[-1] for name, values in parsed.items()}


def _int_arg(query: Mapping[str, str], name: str, default: int, low: int, high: int) -> int:
    text = query.get(name)
    if text is None or text == "":
        return default
    try:
        number = int(text)
    except ValueError:
        raise _HTTPError(400, f"{name} must be an integer, got {text!r}") from None
    if not low <= number <= high:
        raise _HTTPError(400, f"{name} must be between {low} and {high}, got {number}")
    return number


# -- the monitor --------------------------------------------------------------------------------
class Monitor:
    """Processors and views served over HTTP: an ASGI 3 app, and :meth:`serve` for its own server.

    ``title`` heads the HTML page; ``key_limit`` is how many keys ``/api/views/<name>/keys``
    lists when the request says nothing, ``max_key_limit`` the most it lists; ``stats_timeout``
    bounds how long the lag lookup of one processor's stats may take (seconds).
    """

    def __init__(
        self,
        *,
        title: str = "polybroker processors",
        key_limit: int = 100,
        max_key_limit: int = 1000,
        stats_timeout: float = 5.0,
    ) -> None:
        if not 1 <= key_limit <= max_key_limit:
            raise ValueError(f"need 1 <= key_limit <= max_key_limit, got {key_limit} and {max_key_limit}")
        self.title = title
        self.key_limit = key_limit
        self.max_key_limit = max_key_limit
        self.stats_timeout = stats_timeout
        self._processors: dict[str, Processor] = {}
        self._views: dict[str, View] = {}
        self._page = page(title).encode()

    def __repr__(self) -> str:
        return f"<Monitor processors={sorted(self._processors)} views={sorted(self._views)}>"

    # -- registering ---------------------------------------------------------------------------
    def add_processor(self, processor: Processor, name: str | None = None) -> str:
        """Show ``processor`` under ``name`` (default: its group); returns the name used.

        ``ValueError`` if the name is empty or taken by another processor.
        """
        chosen = processor.graph.group if name is None else name
        self._check_name(chosen, self._processors, processor, "processor")
        self._processors[chosen] = processor
        return chosen

    def add_view(self, view: View, name: str | None = None) -> str:
        """Show ``view`` and let the page query it, under ``name`` (default: its table topic).

        Returns the name used; ``ValueError`` if the name is empty or taken by another view.
        """
        chosen = view.topic if name is None else name
        self._check_name(chosen, self._views, view, "view")
        self._views[chosen] = view
        return chosen

    def remove(self, name: str) -> None:
        """Stop showing the processor and/or view registered as ``name`` (no error if none)."""
        self._processors.pop(name, None)
        self._views.pop(name, None)

    @staticmethod
    def _check_name(name: str, taken: Mapping[str, object], item: object, kind: str) -> None:
        if not isinstance(name, str) or not name:
            raise ValueError(f"a {kind} needs a non-empty name, got {name!r}")
        if name in taken and taken[name] is not item:
            raise ValueError(f"a different {kind} is registered as {name!r}; pass name=")

    @property
    def processors(self) -> Mapping[str, Processor]:
        """The registered processors by name (read-only)."""
        return MappingProxyType(self._processors)

    @property
    def views(self) -> Mapping[str, View]:
        """The registered views by name (read-only)."""
        return MappingProxyType(self._views)

    # -- what the API returns ------------------------------------------------------------------
    async def processor_status(self, name: str) -> dict[str, Any]:
        """What ``/api/processors/<name>`` returns; ``KeyError`` for an unknown name."""
        proc = self._processors[name]
        graph = proc.graph
        now = time.time()
        out: dict[str, Any] = {
            "name": name,
            "group": graph.group,
            "state": proc.state.value,
            "recovered": proc.recovered,
            "error": None if proc.error is None else _error_text(proc.error),
            "graph": {
                "inputs": [e.topic for e in graph.input_streams],
                "loop": graph.loop_edge.topic if graph.loop_edge is not None else None,
                "table": graph.table_topic if graph.table_edge is not None else None,
                "joins": [e.topic for e in graph.joint_tables],
                "lookups": [e.topic for e in graph.lookup_tables],
                "outputs": [e.topic for e in graph.output_streams],
            },
        }
        try:
            async with asyncio.timeout(self.stats_timeout):
                stats = await proc.stats()
            out["stats_error"] = None
        except Exception as exc:
            stats = ProcessorStats()
            out["stats_error"] = _error_text(exc)
        partitions = [_partition(p, "active", s, now) for p, s in sorted(stats.group.items())]
        partitions += [
            _partition(p, "recovering", s, now) for p, s in sorted(proc.recovering_stats().items())
        ]
        table_topic = graph.table_topic if graph.table_edge is not None else None
        for p, tables in proc.standby_stats().items():
            standby = PartitionStats(
                table=tables.get(table_topic) if table_topic is not None else None,
                joins={t: s for t, s in tables.items() if t != table_topic},
            )
            partitions.append(_partition(p, "standby", standby, now))
        partitions.sort(key=lambda item: item["partition"])
        out["partitions"] = partitions
        out["lag"] = sum(item["lag"] for item in partitions if item["role"] == "active")
        out["lookups"] = {
            table: {
                "partitions": [
                    {"partition": p, **_table(s, now)} for p, s in sorted(view_stats.partitions.items())
                ],
                "recovery": _overall(view_stats.partitions.values(), now),
            }
            for table, view_stats in sorted(stats.lookups.items())
        }
        return out

    def view_status(self, name: str) -> dict[str, Any]:
        """What ``/api/views/<name>`` returns; ``KeyError`` for an unknown name."""
        view = self._views[name]
        now = time.time()
        stats = view.stats()
        return {
            "name": name,
            "table": view.topic,
            "state": view.state.name.lower(),
            "recovered": view.recovered,
            "codec": type(view.codec).__name__,
            "partitions": [{"partition": p, **_table(s, now)} for p, s in sorted(stats.partitions.items())],
            "recovery": _overall(stats.partitions.values(), now),
        }

    async def status(self) -> dict[str, Any]:
        """Every processor's and view's status: ``{"processors": [...], "views": [...]}``."""
        return {
            "processors": [await self.processor_status(n) for n in list(self._processors)],
            "views": [self.view_status(n) for n in list(self._views)],
        }

    # -- answering -----------------------------------------------------------------------------
    def _view(self, name: str) -> View:
        view = self._views.get(name)
        if view is None:
            raise _HTTPError(404, f"no view named {name!r}")
        return view

    def _processor(self, name: str) -> Processor:
        proc = self._processors.get(name)
        if proc is None:
            raise _HTTPError(404, f"no processor named {name!r}")
        return proc

    def _view_value(self, name: str, key: str) -> _Response:
        view = self._view(name)
        try:
            partition = view.partition_of(key)
            if not view.has(key):
                raise _HTTPError(404, f"view {name!r} has no value for key {key!r}")
            value = view.get(key)
        except (TableNotReady, ClosedError) as exc:
            raise _HTTPError(503, _error_text(exc)) from exc
        except _HTTPError:
            raise
        except Exception as exc:
            raise _HTTPError(500, f"cannot read key {key!r} of view {name!r}: {_error_text(exc)}") from exc
        if value is None:
            raise _HTTPError(404, f"view {name!r} has no value for key {key!r}")
        converted, exact = jsonable(value)
        return _json_response(
            {"view": name, "key": key, "partition": partition, "value": converted, "exact": exact}
        )

    def _view_keys(self, name: str, query: Mapping[str, str]) -> _Response:
        view = self._view(name)
        limit = _int_arg(query, "limit", self.key_limit, 1, self.max_key_limit)
        start = query.get("start") or None
        prefix = query.get("prefix") or None
        keys: list[str] = []
        more = False
        try:
            for key, _ in view.iterate(start, prefix=prefix):
                if len(keys) == limit:
                    more = True
                    break
                keys.append(key)
        except (TableNotReady, ClosedError) as exc:
            raise _HTTPError(503, _error_text(exc)) from exc
        except Exception as exc:
            raise _HTTPError(500, f"cannot list the keys of view {name!r}: {_error_text(exc)}") from exc
        return _json_response({"view": name, "keys": keys, "more": more})

    def _processor_value(self, name: str, key: str) -> _Response:
        proc = self._processor(name)
        try:
            value = proc.get(key)
        except NotOwned as exc:
            raise _HTTPError(404, f"processor {name!r} does not own key {key!r}: {exc}") from exc
        except ProcessorError as exc:
            raise _HTTPError(404, _error_text(exc)) from exc
        except Exception as exc:
            raise _HTTPError(500, f"cannot read key {key!r} of {name!r}: {_error_text(exc)}") from exc
        if value is None:
            raise _HTTPError(404, f"processor {name!r} has no value for key {key!r}")
        converted, exact = jsonable(value)
        return _json_response({"processor": name, "key": key, "value": converted, "exact": exact})

    async def _route(self, segments: list[str], query: Mapping[str, str]) -> _Response:
        if len(segments) > 1 and segments[-1] == "":
            segments = segments[:-1]  # a trailing slash
        match segments:
            case [] | [""]:
                return _Response(
                    200,
                    self._page,
                    "text/html; charset=utf-8",
                    [
                        (b"content-security-policy", _PAGE_POLICY.encode()),
                        (b"referrer-policy", b"no-referrer"),
                    ],
                )
            case ["api"]:
                return _json_response({"processors": list(self._processors), "views": list(self._views)})
            case ["api", "processors"]:
                return _json_response({"processors": (await self.status())["processors"]})
            case ["api", "processors", name]:
                self._processor(name)
                return _json_response(await self.processor_status(name))
            case ["api", "processors", name, "keys", key]:
                return self._processor_value(name, key)
            case ["api", "views"]:
                return _json_response({"views": [self.view_status(n) for n in list(self._views)]})
            case ["api", "views", name]:
                self._view(name)
                return _json_response(self.view_status(name))
            case ["api", "views", name, "keys"]:
                return self._view_keys(name, query)
            case ["api", "views", name, "keys", key]:
                return self._view_value(name, key)
            case ["api", "views", name, "value"]:
                if "key" not in query:
                    raise _HTTPError(400, "give the key as ?key=")
                return self._view_value(name, query["key"])
        raise _HTTPError(404, "no such page")

    async def respond(self, method: str, scope: ASGIScope) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
        """The status, headers and body for an HTTP ``scope`` (never raises for a bad request)."""
        try:
            segments = _segments(scope)
            if method not in _METHODS:
                raise _HTTPError(405, f"method {method} is not allowed; use GET")
            response = await self._route(segments, _query(scope))
        except _HTTPError as exc:
            response = _error_response(exc.status, exc.message)
        except Exception as exc:
            log.exception("the monitor failed to answer %s %r", method, scope.get("path"))
            response = _error_response(500, f"internal error: {_error_text(exc)}")
        headers = [
            (b"content-type", response.content_type.encode()),
            (b"content-length", str(len(response.body)).encode()),
            (b"cache-control", b"no-store"),
            (b"x-content-type-options", b"nosniff"),
            *response.headers,
        ]
        return response.status, headers, b"" if method == "HEAD" else response.body

    async def __call__(self, scope: ASGIScope, receive: ASGIReceive, send: ASGISend) -> None:
        """The ASGI 3 entry point (``http``; ``lifespan`` is acknowledged; websockets refused)."""
        kind = scope.get("type")
        if kind == "lifespan":
            while True:
                message = await receive()
                if message.get("type") == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message.get("type") == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if kind == "websocket":
            await send({"type": "websocket.close", "code": 1003})
            return
        if kind != "http":
            raise ValueError(f"the monitor serves http scopes, not {kind!r}")
        status, headers, body = await self.respond(str(scope.get("method", "GET")).upper(), scope)
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": body, "more_body": False})

    # -- the built-in server -------------------------------------------------------------------
    async def serve(self, host: str = "127.0.0.1", port: int = 0) -> MonitorServer:
        """Serve on ``host:port`` (``0``: a free port) with the built-in HTTP/1.1 server.

        Returns the running :class:`MonitorServer` (an async context manager; ``close()`` stops
        it): ``async with await monitor.serve() as server: print(server.url)``.
        """
        server = MonitorServer(self)
        await server._start(host, port)
        return server


class MonitorServer(AsyncResource):
    """A minimal HTTP/1.1 server on asyncio streams running an ASGI app (one request per connection).

    Made by :meth:`Monitor.serve`. It reads the request line and headers (at most 64 KiB,
    within ``read_timeout`` seconds), runs the app and closes the connection. A request body (up
    to 64 KiB; larger or chunked ones are refused with ``413``) is read and dropped: the app gets
    none. ``host``, ``port`` and ``url`` say where it listens.
    """

    def __init__(
        self,
        app: Callable[[ASGIScope, ASGIReceive, ASGISend], Awaitable[None]],
        *,
        read_timeout: float = 10.0,
    ) -> None:
        self.app = app
        self.read_timeout = read_timeout
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._closed = False
        self._stopped = asyncio.Event()
        self.host = ""
        self.port = 0

    def __repr__(self) -> str:
        return f"<MonitorServer {self.url}{' closed' if self._closed else ''}>"

    @property
    def url(self) -> str:
        """``http://host:port/``."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}/"

    async def _start(self, host: str, port: int) -> None:
        self._server = await asyncio.start_server(self._accept, host, port, limit=64 * 1024)
        sockname = self._server.sockets[0].getsockname()
        self.host, self.port = str(sockname[0]), int(sockname[1])

    async def _accept(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, TimeoutError, asyncio.IncompleteReadError):
            pass  # the client went away or stalled (a body slower than read_timeout)
        except Exception:
            log.exception("the monitor's HTTP server failed on a connection")
        finally:
            self._tasks.discard(task)
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            async with asyncio.timeout(self.read_timeout):
                head = await reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            await self._reply(writer, _error_response(431, "the request head is too large"))
            return
        except (TimeoutError, asyncio.IncompleteReadError):
            return
        lines = head[:-4].split(b"\r\n")
        parts = lines[0].split(b" ")
        if len(parts) != 3 or not parts[2].startswith(b"HTTP/1.") or not parts[1]:
            await self._reply(writer, _error_response(400, "a malformed request line"))
            return
        method, target, version = parts
        headers: list[tuple[bytes, bytes]] = []
        for line in lines[1:]:
            name, sep, value = line.partition(b":")
            if not sep or not name or name != name.strip():
                await self._reply(writer, _error_response(400, "a malformed header line"))
                return
            headers.append((name.lower(), value.strip()))
        if not await self._drain_body(reader, dict(headers)):
            await self._reply(writer, _error_response(413, "request bodies are not read here"))
            return
        if target.startswith((b"http://", b"https://")):  # absolute form: keep the path
            target = b"/" + target.split(b"/", 3)[3] if target.count(b"/") >= 3 else b"/"
        if not target.startswith(b"/"):
            await self._reply(writer, _error_response(400, "the request target must be a path"))
            return
        raw_path, _, query = target.partition(b"?")
        peer = writer.get_extra_info("peername")
        local = writer.get_extra_info("sockname")
        scope: ASGIScope = {
            "type": "http",
            "asgi": {"version": "3.0", "spec_version": "2.3"},
            "http_version": version[5:].decode("latin-1"),
            "method": method.decode("latin-1").upper(),
            "scheme": "http",
            "path": unquote(raw_path.decode("latin-1")),
            "raw_path": raw_path,
            "query_string": query,
            "root_path": "",
            "headers": headers,
            "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
            "server": tuple(local[:2]) if isinstance(local, tuple) else None,
        }
        sent_request = False

        async def receive() -> MutableMapping[str, Any]:
            nonlocal sent_request
            if not sent_request:
                sent_request = True
                return {"type": "http.request", "body": b"", "more_body": False}
            await asyncio.Event().wait()  # the client's disconnect is not watched: wait forever
            return {"type": "http.disconnect"}

        started = False

        async def send(message: MutableMapping[str, Any]) -> None:
            nonlocal started
            if message["type"] == "http.response.start":
                status = int(message["status"])
                try:
                    reason = http.HTTPStatus(status).phrase
                except ValueError:
                    reason = "Status"
                out = [f"HTTP/1.1 {status} {reason}\r\n".encode()]
                for name, value in message.get("headers", []):
                    out.append(bytes(name) + b": " + bytes(value) + b"\r\n")
                out.append(b"connection: close\r\n\r\n")
                writer.write(b"".join(out))
                started = True
            elif message["type"] == "http.response.body":
                writer.write(bytes(message.get("body", b"")))
            await writer.drain()

        try:
            await self.app(scope, receive, send)
        except Exception:
            log.exception("the monitor app failed")
            if not started:
                await self._reply(writer, _error_response(500, "internal error"))
            return
        if not started:
            await self._reply(writer, _error_response(500, "the app sent no response"))

    async def _drain_body(self, reader: asyncio.StreamReader, headers: Mapping[bytes, bytes]) -> bool:
        """Read and drop a small request body (closing on unread data would reset the connection)."""
        if b"transfer-encoding" in headers:
            return False
        try:
            length = int(headers.get(b"content-length", b"0"))
        except ValueError:
            return False
        if length < 0 or length > _MAX_BODY:
            return False
        if length:
            async with asyncio.timeout(self.read_timeout):
                await reader.readexactly(length)
        return True

    @staticmethod
    async def _reply(writer: asyncio.StreamWriter, response: _Response) -> None:
        reason = http.HTTPStatus(response.status).phrase
        head = (
            f"HTTP/1.1 {response.status} {reason}\r\ncontent-type: {response.content_type}\r\n"
            f"content-length: {len(response.body)}\r\nconnection: close\r\n\r\n"
        )
        writer.write(head.encode() + response.body)
        await writer.drain()

    async def serve_forever(self) -> None:
        """Wait until the server is closed (it serves from :meth:`Monitor.serve` on)."""
        if self._server is None:
            raise ClosedError("the monitor server is not started")
        await self._stopped.wait()

    async def close(self) -> None:
        """Stop listening and drop open connections (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._stopped.set()
        server = self._server
        if server is not None:
            server.close()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(BaseException):
                await task
        if server is not None:
            with contextlib.suppress(Exception):
                await server.wait_closed()
