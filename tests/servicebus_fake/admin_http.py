"""The FAKE's entity management over HTTP: the ATOM requests of ``ServiceBusAdministrationClient``.

Service Bus manages queues, topics and subscriptions through an HTTPS REST API that exchanges
ATOM entries (``<entry><content><QueueDescription>...``). This fake serves the part the
polybroker backend uses, on plain HTTP at ``FakeServiceBus.management_endpoint``:

* ``PUT /{queue-or-topic}`` with a ``QueueDescription`` or ``TopicDescription``, and
  ``PUT /{topic}/subscriptions/{name}`` with a ``SubscriptionDescription``: create the entity
  (201, the request's entry echoed back), or 409 when the name is taken; ``LockDuration``,
  ``MaxDeliveryCount``, ``RequiresSession`` and ``ForwardDeadLetteredMessagesTo`` are honoured;
* ``GET`` of the same paths: 200 with an entry, or 404;
* ``DELETE``: 200, or 404.

Tokens are not checked. Every entity change runs on the AMQP server's thread (``call``), like the
fixture methods. Not modelled: updates (``If-Match: *``), listing, rules, namespace properties.
"""

from __future__ import annotations

import http.server
import logging
import re
import threading
import xml.etree.ElementTree as ET
from collections.abc import Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from tests.servicebus_fake.entities import EntityError, EntityOptions, Namespace

__all__ = ["ManagementServer"]

log = logging.getLogger("tests.servicebus_fake")

_SB = "{http://schemas.microsoft.com/netservices/2010/10/servicebus/connect}"
_ATOM = "http://www.w3.org/2005/Atom"
_DURATION = re.compile(r"^P(?:(\d+)D)?(?:T(?:(\d+)H)?(?:(\d+)M)?(?:(\d+(?:\.\d+)?)S)?)?$")


def _seconds(duration: str) -> float:
    """An ISO-8601 duration (``PT30S``, ``PT1M``, ``P1DT2H``) in seconds."""
    match = _DURATION.match(duration.strip())
    if match is None:
        raise ValueError(f"bad duration {duration!r}")
    days, hours, minutes, seconds = (float(g) if g else 0.0 for g in match.groups())
    return days * 86400 + hours * 3600 + minutes * 60 + seconds


def _description(body: bytes) -> tuple[str, dict[str, str]]:
    """The description element's kind (``QueueDescription``, ...) and its child texts."""
    root = ET.fromstring(body)
    for element in root.iter():
        tag = element.tag
        if tag.startswith(_SB) and tag.endswith("Description"):
            return tag[len(_SB) :], {child.tag[len(_SB) :]: (child.text or "") for child in element}
    raise ValueError("the entry holds no entity description")


def _options(namespace: Namespace, fields: dict[str, str]) -> EntityOptions:
    defaults = namespace.defaults
    return EntityOptions(
        lock_duration=_seconds(fields["LockDuration"])
        if "LockDuration" in fields
        else defaults.lock_duration,
        max_delivery_count=int(fields.get("MaxDeliveryCount") or defaults.max_delivery_count),
        requires_session=fields.get("RequiresSession", "false").lower() == "true",
        max_message_size=defaults.max_message_size,
        forward_dead_lettered_messages_to=fields.get("ForwardDeadLetteredMessagesTo") or None,
    )


def _entry(name: str, kind: str) -> bytes:
    return (
        f"<entry xmlns='{_ATOM}'><title type='text'>{name}</title>"
        f"<content type='application/xml'><{kind} xmlns='{_SB[1:-1]}'/></content></entry>"
    ).encode()


class _Conflict(Exception):
    pass


class ManagementServer:
    """A threaded HTTP server on ``host`` answering management requests for ``namespace``.

    ``call`` runs a function on the AMQP server's thread and returns its result.
    """

    def __init__(self, namespace: Namespace, call: Callable[[Callable[[], Any]], Any], host: str) -> None:
        self.namespace = namespace
        self.call = call
        owner = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:
                log.debug("management: " + format, *args)

            def _answer(self, status: int, body: bytes = b"") -> None:
                self.send_response(status)
                self.send_header("Content-Type", "application/atom+xml;type=entry;charset=utf-8")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def _path(self) -> list[str]:
                return [unquote(p) for p in urlsplit(self.path).path.strip("/").split("/") if p]

            def do_PUT(self) -> None:
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                try:
                    kind, fields = _description(body)
                    created = owner.create(self._path(), kind, fields)
                except _Conflict as exc:
                    self._answer(409, str(exc).encode())
                except (ValueError, ET.ParseError, EntityError) as exc:
                    self._answer(400, str(exc).encode())
                else:
                    self._answer(201, created)

            def do_GET(self) -> None:
                found = owner.find(self._path())
                if found is None:
                    self._answer(404)
                else:
                    self._answer(200, found)

            def do_DELETE(self) -> None:
                self._answer(200 if owner.delete(self._path()) else 404)

        self._server = http.server.ThreadingHTTPServer((host, 0), Handler)
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def endpoint(self) -> str:
        """``http://HOST:PORT``."""
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}"

    def start(self) -> None:
        """Serve in a daemon thread."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="fake-sb-management", daemon=True
        )
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (idempotent)."""
        if self._thread is not None:
            self._server.shutdown()
            self._server.server_close()
            self._thread = None

    # -- operations (each runs on the AMQP server's thread) ---------------------------------------
    def create(self, path: list[str], kind: str, fields: dict[str, str]) -> bytes:
        """Create the entity at ``path`` from its description; its entry."""
        namespace = self.namespace

        def run() -> bytes:
            if len(path) == 1 and kind in ("QueueDescription", "TopicDescription"):
                name = path[0]
                if name.lower() in namespace.queues or name.lower() in namespace.topics:
                    raise _Conflict(f"MessagingEntityAlreadyExists: {name}")
                if kind == "QueueDescription":
                    namespace.create_queue(name, _options(namespace, fields))
                else:
                    namespace.create_topic(name)
                return _entry(name, kind)
            if len(path) == 3 and path[1].lower() == "subscriptions" and kind == "SubscriptionDescription":
                topic = namespace.topics.get(path[0].lower())
                if topic is None:
                    raise EntityError("amqp:not-found", f"topic {path[0]} does not exist")
                if path[2].lower() in topic.subscriptions:
                    raise _Conflict(f"MessagingEntityAlreadyExists: {path[0]}/subscriptions/{path[2]}")
                namespace.create_subscription(path[0], path[2], _options(namespace, fields))
                return _entry(path[2], kind)
            raise ValueError(f"cannot PUT a {kind} at /{'/'.join(path)}")

        result: bytes = self.call(run)
        return result

    def find(self, path: list[str]) -> bytes | None:
        """The entry of the entity at ``path``, or None."""
        namespace = self.namespace

        def run() -> bytes | None:
            if len(path) == 1:
                name = path[0].lower()
                if name in namespace.queues:
                    return _entry(path[0], "QueueDescription")
                if name in namespace.topics:
                    return _entry(path[0], "TopicDescription")
            elif len(path) == 3 and path[1].lower() == "subscriptions":
                topic = namespace.topics.get(path[0].lower())
                if topic is not None and path[2].lower() in topic.subscriptions:
                    return _entry(path[2], "SubscriptionDescription")
            return None

        found: bytes | None = self.call(run)
        return found

    def delete(self, path: list[str]) -> bool:
        """Delete the entity at ``path``; False when there is none."""
        namespace = self.namespace

        def run() -> bool:
            if len(path) == 1:
                name = path[0].lower()
                return (
                    namespace.queues.pop(name, None) is not None
                    or namespace.topics.pop(name, None) is not None
                )
            if len(path) == 3 and path[1].lower() == "subscriptions":
                topic = namespace.topics.get(path[0].lower())
                return topic is not None and topic.subscriptions.pop(path[2].lower(), None) is not None
            return False

        deleted: bool = self.call(run)
        return deleted
