"""A STUB of a Confluent Schema Registry's HTTP API, for the error-mapping tests (not a registry).

It answers every request from a table of canned responses keyed by method and path prefix, on a
free 127.0.0.1 port, in a thread of its own; anything not in the table is the registry's 404
"subject not found". It stores nothing, checks no schema and knows no compatibility: it exists so
the tests can see what the client does with each error response the real API documents (404
40401/40403, 409, 401, 403, 422, 500). It records the requests it saw (method, path, whether an
Authorization header came) so a test can check credentials were sent without reading them.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

__all__ = ["RegistryStub", "registry_stub"]


@dataclass
class RegistryStub:
    """The running stub: its ``url``, its ``responses`` (editable) and the ``requests`` it saw."""

    url: str
    #: (method, path prefix) -> (HTTP status, JSON body); the longest matching prefix wins.
    responses: dict[tuple[str, str], tuple[int, dict[str, Any]]] = field(default_factory=dict)
    #: (method, path, had an Authorization header) of every request.
    requests: list[tuple[str, str, bool]] = field(default_factory=list)

    def answer(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        """The canned response to ``method path``."""
        matches = [(len(p), r) for (m, p), r in self.responses.items() if m == method and path.startswith(p)]
        if matches:
            return max(matches, key=lambda m: m[0])[1]
        return 404, {"error_code": 40401, "message": "Subject not found."}


def _handler(stub: RegistryStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _serve(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            if length:
                self.rfile.read(length)
            path = self.path.split("?", 1)[0]
            stub.requests.append((self.command, path, "Authorization" in self.headers))
            status, body = stub.answer(self.command, path)
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/vnd.schemaregistry.v1+json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _serve

        def log_message(self, format: str, *args: Any) -> None:
            pass

    return Handler


@contextmanager
def registry_stub() -> Iterator[RegistryStub]:
    """A started stub; stopped on exit."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(stub := RegistryStub("")))
    stub.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, args=(0.02,), name="registry-stub", daemon=True)
    thread.start()
    try:
        yield stub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)
