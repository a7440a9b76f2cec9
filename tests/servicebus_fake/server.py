"""The AMQP 1.0 side of the fake: a python-qpid-proton event loop on a background thread.

It accepts plain-AMQP connections on 127.0.0.1 with SASL ANONYMOUS, answers the ``$cbs``
``put-token`` exchange (any token is accepted), and routes links by address:

* a sender link to an entity (queue or topic) stores what arrives (single messages and the
  SDK's batch format) and settles each delivery ``accepted``;
* a receiver link on a queue, subscription or dead-letter queue gets messages as it gives
  credit: peek-lock (the delivery tag is the lock token; the outcome the client sends is applied,
  echoed and settled, as the SDK waits for) or receive-and-delete (pre-settled);
  ``com.microsoft:session-filter`` on the source asks for a session, echoed on the attach with
  ``com.microsoft:locked-until-utc`` in the link properties;
* ``<entity>/$management`` and ``$cbs`` link pairs carry request/response operations.

:class:`FakeServiceBus` is the handle tests use: start/stop, the connection string, and a
fixture API (create entities, change lock durations, count messages) that runs on the server
thread.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import logging
import socket
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from typing import Any, Self, TypeVar
from urllib.parse import urlsplit

from proton import (
    Condition,
    Data,
    Delivery,
    Disposition,
    Endpoint,
    Event,
    Handler,
    Link,
    Message,
    Terminus,
    symbol,
)
from proton.reactor import ApplicationEvent, Container, EventInjector

from broker.driver.devserver import StartedInWith
from tests.servicebus_fake.admin_http import ManagementServer
from tests.servicebus_fake.entities import (
    EntityError,
    EntityOptions,
    Lock,
    Namespace,
    Queue,
    StoredMessage,
    Topic,
    scheduled_time,
)
from tests.servicebus_fake.management import handle_management

__all__ = ["FakeServiceBus"]

log = logging.getLogger("tests.servicebus_fake")


class _QuietDisconnects(logging.Filter):
    """Drop proton's error records for clients that hang up (the SDK closes sockets abruptly)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(("Couldn't send", "Couldn't recv"))


logging.getLogger("proton").addFilter(_QuietDisconnects())

T = TypeVar("T")

SESSION_FILTER = symbol("com.microsoft:session-filter")
LOCKED_UNTIL_UTC = symbol("com.microsoft:locked-until-utc")
MAX_BATCH_SIZE = symbol("com.microsoft:max-message-batch-size")
OPERATION_TIMEOUT = symbol("com.microsoft:timeout")
TRACKING_ID = symbol("com.microsoft:tracking-id")
DOTNET_EPOCH_TICKS = 621355968000000000  # 0001-01-01 to 1970-01-01 in 100 ns ticks
SECTION_DATA = 0x75
RECEIVE_CREDIT = 1000
TICK = 0.02


def _node(address: str | None) -> str:
    """The entity path of a link address (``amqps://host/queue`` -> ``queue``)."""
    if not address:
        return ""
    if "://" in address:
        parts = urlsplit(address)
        return parts.path.strip("/")
    return address.strip("/")


def _is_section(prefix: bytes) -> bool:
    return len(prefix) >= 3 and prefix[0] == 0x00 and prefix[1] == 0x53 and 0x70 <= prefix[2] <= 0x78


def _split_batch(data: bytes) -> list[Message] | None:
    """The inner messages of the SDK's batch format (data sections that each hold a message)."""
    inner: list[Message] = []
    offset = 0
    view = memoryview(data)
    while offset < len(data):
        section = Data()
        used = section.decode(bytes(view[offset:]))
        offset += used
        section.rewind()
        section.next()
        described = section.get_object()
        descriptor = getattr(described, "descriptor", None)
        if descriptor != SECTION_DATA:
            continue
        payload = bytes(described.value)
        if not _is_section(payload[:3]):
            return None
        message = Message()
        message.decode(payload)
        inner.append(message)
    return inner or None


def decode_incoming(data: bytes) -> list[Message]:
    """The messages of one transfer: one, or several for the SDK's batch format."""
    message = Message()
    message.decode(data)
    body = message.body
    if message.inferred and isinstance(body, bytes | memoryview):
        if _is_section(bytes(body[:3])):
            inner = _split_batch(data)
            if inner is not None:
                return inner
        if isinstance(body, memoryview):
            message.body = bytes(body)
    return [message]


def _error(condition: str, description: str) -> Condition:
    """An AMQP error with the ``info`` map the SDK expects (it reads all three fields)."""
    return Condition(condition, description, {TRACKING_ID: str(uuid.uuid4())})


def _refuse(link: Link, condition: str, description: str) -> None:
    # Attach with null terminus, then detach with the error: the way a broker refuses a link.
    link.source.type = Terminus.UNSPECIFIED
    link.target.type = Terminus.UNSPECIFIED
    link.open()
    link.condition = _error(condition, description)
    link.close()


class _EntityReceiver:
    """A client's receiving link on a queue or subscription (the entities' ``Consumer``)."""

    def __init__(self, link: Link, queue: Queue, receive_and_delete: bool) -> None:
        self.link = link
        self.queue = queue
        self.receive_and_delete = receive_and_delete
        self.session_id: str | None = None
        self.closed = False
        self._tags = 0

    def credit(self) -> int:
        """The link credit, 0 once the link is gone."""
        if self.closed:
            return 0
        return int(self.link.credit)

    def deliver(self, stored: StoredMessage, lock: Lock | None) -> None:
        """Send ``stored`` (locked by ``lock``, or pre-settled without one)."""
        link = self.link
        if lock is None:
            self._tags += 1
            delivery = link.delivery(self._tags.to_bytes(8, "big"))
            link.stream(stored.annotated(None).encode())
            link.advance()
            delivery.settle()
            return
        delivery = link.delivery(lock.token.bytes_le)
        link.stream(stored.annotated(lock.until).encode())
        link.advance()
        delivery.fake_lock = lock
        lock.delivery = delivery

    def session_lost(self, description: str) -> None:
        """Detach with ``session-lock-lost``."""
        if not self.closed:
            self.closed = True
            self.link.condition = _error("com.microsoft:session-lock-lost", description)
            self.link.close()


class _ReplyLink:
    """The server end of a request/response pair's response link ($cbs, $management)."""

    def __init__(self, link: Link) -> None:
        self.link = link
        self.pending: deque[Message] = deque()
        self.closed = False

    def send(self, message: Message) -> None:
        """Send now if there is credit, else when credit comes."""
        self.pending.append(message)
        self.flush()

    def flush(self) -> None:
        """Send what the credit allows."""
        link = self.link
        while self.pending and not self.closed and link.credit > 0:
            message = self.pending.popleft()
            link.send(message)


class _Server(Handler):
    """The proton event handler: connections, links, deliveries, timers, injected calls."""

    def __init__(self, namespace: Namespace) -> None:
        super().__init__()
        self.namespace = namespace
        self.container: Container | None = None
        self.acceptor: Any = None
        self.stopping = False
        #: Fault: ignore the client's dispositions of locked messages and its ``$management``
        #: requests (settlements, lock renewals): never apply, never answer, as a broker that stops
        #: answering does; the locks then run out and the messages come back.
        self.withhold_outcomes = False

    # -- plumbing -------------------------------------------------------------------------------
    def on_reactor_init(self, event: Event) -> None:
        """Start the clock."""
        event.container.schedule(TICK, self)

    def on_timer_task(self, event: Event) -> None:
        """Expire locks, enqueue scheduled messages, every ``TICK`` seconds."""
        if self.stopping:
            return
        try:
            self.namespace.tick(time.time())
        except Exception:
            log.exception("fake Service Bus: tick failed")
        event.container.schedule(TICK, self)

    def on_fake_call(self, event: Event) -> None:
        """Run a function injected from another thread."""
        function, future = event.subject
        if not future.set_running_or_notify_cancel():
            return
        try:
            future.set_result(function())
        except BaseException as exc:
            future.set_exception(exc)

    def on_fake_stop(self, event: Event) -> None:
        """Close every connection and the acceptor, then stop the loop."""
        self.stopping = True
        if self.acceptor is not None:
            self.acceptor.close()
        container = self.container
        assert container is not None
        for connection in list(getattr(container, "_fake_connections", [])):
            with contextlib.suppress(Exception):
                connection.close()
        container.stop()

    def on_unhandled(self, method: str, *args: Any) -> None:
        """Ignore events the fake does not need."""

    # -- connections and sessions ----------------------------------------------------------------
    def on_connection_bound(self, event: Event) -> None:
        """Offer SASL ANONYMOUS (the SDK authenticates through $cbs afterwards)."""
        sasl = event.transport.sasl()
        sasl.allowed_mechs("ANONYMOUS")
        event.transport.max_frame_size = 256 * 1024

    def on_connection_remote_open(self, event: Event) -> None:
        """Accept the connection."""
        connection = event.connection
        connection.container = "fake-servicebus"
        connection.open()
        container = event.container
        if not hasattr(container, "_fake_connections"):
            container._fake_connections = set()
        container._fake_connections.add(connection)

    def on_connection_remote_close(self, event: Event) -> None:
        """Close our end too."""
        self._forget_links(event.connection)
        event.connection.close()

    def on_transport_closed(self, event: Event) -> None:
        """The socket went away: stop delivering to the connection's links."""
        connection = event.connection
        if connection is not None:
            self._forget_links(connection)
            with contextlib.suppress(Exception):
                event.container._fake_connections.discard(connection)

    def on_session_remote_open(self, event: Event) -> None:
        """Accept the session."""
        session = event.session
        session.fake_replies = {}
        session.open()

    def on_session_remote_close(self, event: Event) -> None:
        """Close our end too."""
        event.session.close()

    def _forget_links(self, connection: Any) -> None:
        link = connection.link_head(0)
        while link is not None:
            self._detach(link)
            link = link.next(0)

    def _detach(self, link: Link) -> None:
        consumer = getattr(link, "fake_consumer", None)
        if consumer is not None and not getattr(link, "fake_detached", False):
            link.fake_detached = True
            consumer.closed = True
            try:
                consumer.queue.detach(consumer)
            except Exception:
                log.exception("fake Service Bus: detach failed")
        reply = getattr(link, "fake_reply", None)
        if reply is not None:
            reply.closed = True

    # -- links ----------------------------------------------------------------------------------
    def on_link_remote_open(self, event: Event) -> None:
        """Route a new link by its address."""
        link = event.link
        try:
            if link.is_sender:
                self._attach_outgoing(link)
            else:
                self._attach_incoming(link)
        except EntityError as exc:
            _refuse(link, exc.condition, exc.description)
        except Exception as exc:
            log.exception("fake Service Bus: attach failed")
            _refuse(link, "amqp:internal-error", str(exc))

    def _mirror(self, link: Link) -> None:
        link.source.copy(link.remote_source)
        link.target.copy(link.remote_target)
        link.snd_settle_mode = link.remote_snd_settle_mode
        link.rcv_settle_mode = link.remote_rcv_settle_mode

    def _attach_incoming(self, link: Link) -> None:
        """The client sends: to $cbs, to a $management node, or to a queue or topic."""
        node = _node(link.remote_target.address)
        lowered = node.lower()
        if lowered == "$cbs" or lowered.endswith("$management"):
            link.fake_role = "request"
            link.fake_node = node
        else:
            target = self.namespace.target(node)
            link.fake_role = "entity"
            link.fake_target = target
            size = (
                target.options.max_message_size
                if isinstance(target, Queue)
                else self.namespace.defaults.max_message_size
            )
            link.fake_max_size = size
            link.max_message_size = size
            link.properties = {MAX_BATCH_SIZE: size}
        self._mirror(link)
        link.open()
        link.flow(RECEIVE_CREDIT)

    def _attach_outgoing(self, link: Link) -> None:
        """The client receives: $cbs or $management responses, or messages of an entity."""
        node = _node(link.remote_source.address)
        lowered = node.lower()
        if lowered == "$cbs" or lowered.endswith("$management"):
            self._mirror(link)
            reply = _ReplyLink(link)
            link.fake_reply = reply
            link.session.fake_replies[lowered] = reply
            link.open()
            return
        queue = self.namespace.queue(node, create=True)
        receive_and_delete = link.remote_snd_settle_mode == Link.SND_SETTLED
        consumer = _EntityReceiver(link, queue, receive_and_delete)
        wants_session, session_id = _session_filter(link)
        if queue.options.requires_session and not queue.is_dead_letter and not wants_session:
            raise EntityError(
                "amqp:not-allowed",
                f"It is not possible for an entity that requires sessions to create a non-sessionful message "
                f"receiver. Entity: {queue.path}",
            )
        if wants_session and not queue.options.requires_session:
            raise EntityError(
                "amqp:not-allowed",
                "It is not possible for an entity that does not require sessions to create a session "
                "receiver. "
                f"Entity: {queue.path}",
            )
        if not wants_session:
            self._mirror(link)
            link.fake_consumer = consumer
            link.open()
            queue.attach(consumer)
            queue.dispatch()
            return
        chosen = queue.lock_session(session_id, consumer)
        if chosen is not None:
            self._open_session_receiver(link, consumer, chosen)
            return
        timeout_ms = (link.remote_properties or {}).get(OPERATION_TIMEOUT) or 60000
        deadline = time.time() + float(timeout_ms) / 1000.0

        def ready(found: str | None) -> None:
            if link.state & Endpoint.REMOTE_CLOSED:
                if found is not None:
                    queue.session(found).holder = None
                return
            if found is None:
                _refuse(link, "com.microsoft:timeout", "no session became available in time")
                return
            try:
                session = queue.lock_session(found, consumer)
            except EntityError as exc:
                _refuse(link, exc.condition, exc.description)
                return
            if session is not None:
                self._open_session_receiver(link, consumer, session)

        queue.wait_for_session(deadline, ready)

    def _open_session_receiver(self, link: Link, consumer: _EntityReceiver, session_id: str) -> None:
        queue = consumer.queue
        consumer.session_id = session_id
        self._mirror(link)
        filters = link.source.filter
        filters.clear()
        filters.put_map()
        filters.enter()
        filters.put_symbol(SESSION_FILTER)
        filters.put_string(session_id)
        filters.exit()
        locked_until = queue.session(session_id).locked_until
        link.properties = {LOCKED_UNTIL_UTC: int(locked_until * 10_000_000) + DOTNET_EPOCH_TICKS}
        link.fake_consumer = consumer
        link.open()
        queue.attach(consumer)
        queue.dispatch()

    def on_link_remote_close(self, event: Event) -> None:
        """Stop delivering to the link and close our end."""
        link = event.link
        self._detach(link)
        link.close()

    def on_link_remote_detach(self, event: Event) -> None:
        """A detach without close: treat it like a close."""
        self.on_link_remote_close(event)

    def on_link_flow(self, event: Event) -> None:
        """The client gave credit: deliver (and answer a drain)."""
        link = event.link
        if not link.is_sender:
            return
        consumer = getattr(link, "fake_consumer", None)
        if consumer is not None:
            consumer.queue.dispatch()
        else:
            reply = getattr(link, "fake_reply", None)
            if reply is not None:
                reply.flush()
        if link.drain_mode and link.credit > 0:
            link.drained()

    # -- deliveries -----------------------------------------------------------------------------
    def on_delivery(self, event: Event) -> None:
        """An incoming transfer, or the client's disposition of one of ours."""
        delivery = event.delivery
        link = delivery.link
        try:
            if link.is_receiver:
                self._incoming(link, delivery)
            else:
                self._outcome(delivery)
        except Exception:
            log.exception("fake Service Bus: delivery handling failed")

    def _incoming(self, link: Link, delivery: Delivery) -> None:
        if delivery.partial or not delivery.readable:
            return
        data = link.recv(delivery.pending) or b""
        link.advance()
        role = getattr(link, "fake_role", None)
        if role == "request":
            self._request(link, data)
            delivery.update(Disposition.ACCEPTED)
        elif role == "entity":
            condition = self._store(link, data)
            if condition is None:
                delivery.update(Disposition.ACCEPTED)
            else:
                delivery.local.condition = condition
                delivery.update(Disposition.REJECTED)
        delivery.settle()
        if link.credit < RECEIVE_CREDIT // 2:
            link.flow(RECEIVE_CREDIT - link.credit)

    def _store(self, link: Link, data: bytes) -> Condition | None:
        if len(data) > link.fake_max_size:
            return _error(
                "amqp:link:message-size-exceeded",
                f"The received message (size {len(data)} bytes) exceeds the limit "
                f"({link.fake_max_size} bytes) "
                "currently allowed on the link.",
            )
        target: Queue | Topic = link.fake_target
        try:
            for message in decode_incoming(data):
                when = scheduled_time(message)
                target.add(message, when=when)
        except EntityError as exc:
            return _error(exc.condition, exc.description)
        return None

    def _request(self, link: Link, data: bytes) -> None:
        request = Message()
        request.decode(data)
        node = link.fake_node
        if node.lower() == "$cbs":
            response = Message(
                correlation_id=request.id,
                properties={"status-code": 202, "status-description": "Accepted"},
            )
        elif self.withhold_outcomes:
            return
        else:
            entity = node[: -len("/$management")] if node.lower().endswith("/$management") else node
            response = handle_management(self.namespace, entity, request)
        reply = link.session.fake_replies.get(node.lower())
        if reply is None:
            log.warning("fake Service Bus: no response link for %s", node)
            return
        reply.send(response)

    def _outcome(self, delivery: Delivery) -> None:
        lock: Lock | None = getattr(delivery, "fake_lock", None)
        if lock is not None and self.withhold_outcomes:
            return
        if lock is None:  # a response on a $cbs/$management link, or a pre-settled delivery
            if delivery.settled or delivery.remote_state:
                delivery.settle()
            return
        state = delivery.remote_state
        if not state:
            if delivery.settled:
                self._forget_delivery(delivery, lock)
                delivery.settle()
            return
        if delivery.local_state:  # already answered
            return
        self._forget_delivery(delivery, lock)
        queue, token, remote = lock.queue, lock.token, delivery.remote
        try:
            if state == Disposition.ACCEPTED:
                queue.complete(token)
            elif state == Disposition.RELEASED:
                queue.release(token)
            elif state == Disposition.MODIFIED:
                if remote.undeliverable:
                    queue.defer(token)
                elif remote.failed:
                    queue.abandon(token)
                else:
                    queue.release(token)
            elif state == Disposition.REJECTED:
                condition = remote.condition
                info = dict(condition.info or {}) if condition is not None and condition.info else {}
                reason = info.get("DeadLetterReason") or info.get(symbol("DeadLetterReason"))
                description = info.get("DeadLetterErrorDescription") or (
                    condition.description if condition is not None else None
                )
                queue.dead_letter(
                    token,
                    None if reason is None else str(reason),
                    None if description is None else str(description),
                )
            else:
                return
        except EntityError as exc:
            if not delivery.settled:
                delivery.local.condition = _error(exc.condition, exc.description)
                delivery.update(Disposition.REJECTED)
            delivery.settle()
            return
        if not delivery.settled:
            if state == Disposition.MODIFIED:
                delivery.local.failed = remote.failed
                delivery.local.undeliverable = remote.undeliverable
            delivery.update(state)
        delivery.settle()

    @staticmethod
    def _forget_delivery(delivery: Delivery, lock: Lock) -> None:
        # The lock and the proton delivery point at each other through proton's C record, which
        # Python's garbage collector cannot see through: break the cycle once the outcome is in.
        lock.delivery = None
        with contextlib.suppress(Exception):
            del delivery.fake_lock


def _session_filter(link: Link) -> tuple[bool, str | None]:
    """Whether the source asks for a session, and which (None: the next available)."""
    filters = link.remote_source.filter
    if filters is None:
        return False, None
    filters.rewind()
    if filters.next() is None:
        return False, None
    value = filters.get_object()
    if not isinstance(value, dict) or SESSION_FILTER not in value:
        return False, None
    session = value[SESSION_FILTER]
    if session is None:
        return True, None
    if isinstance(session, bytes):
        session = session.decode()
    return True, str(session)


class FakeServiceBus(StartedInWith):
    """A fake Service Bus namespace on ``127.0.0.1``, for tests: start it, connect the SDK to it.

    ``connection_string`` is what the SDK (or ``broker.connect``) takes. The fixture methods
    (``create_queue``, ``create_topic``, ``update``, ``count``, ...) run on the server thread and
    return once done. Entities that do not exist are created on first use (queues when sent to or
    received from, topics and subscriptions when a subscription is received from) unless
    ``auto_create=False``.
    """

    def __init__(
        self,
        port: int = 0,
        *,
        host: str = "127.0.0.1",
        defaults: EntityOptions | None = None,
        auto_create: bool = True,
    ) -> None:
        self.host = host
        self.port = port
        self.namespace = Namespace(defaults, auto_create=auto_create)
        self._handler = _Server(self.namespace)
        self._injector = EventInjector()
        self._thread: threading.Thread | None = None
        self._container: Container | None = None
        self._error: BaseException | None = None
        self._management = ManagementServer(self.namespace, self.call, host)

    def __repr__(self) -> str:
        return f"<FakeServiceBus {self.host}:{self.port} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        """True while the server thread runs."""
        return self._thread is not None and self._thread.is_alive()

    @property
    def connection_string(self) -> str:
        """A connection string the SDK accepts: plain AMQP to this server (``UseDevelopmentEmulator``)."""
        return (
            f"Endpoint=sb://{self.host}:{self.port};SharedAccessKeyName=fake;"
            "SharedAccessKey=ZmFrZS1rZXk=;UseDevelopmentEmulator=true"
        )

    @property
    def management_endpoint(self) -> str:
        """``http://HOST:PORT`` of the entity management API (the backend's ``management_endpoint``)."""
        return self._management.endpoint

    @property
    def settings(self) -> dict[str, str]:
        """What ``broker.connect`` takes to reach this fake, management included."""
        return {"url": self.connection_string, "management_endpoint": self.management_endpoint}

    # -- lifecycle ------------------------------------------------------------------------------
    def start(self) -> Self:
        """Bind, start the server thread, and wait until it accepts connections."""
        if self.running:
            return self
        if not self.port:
            with socket.socket() as sock:
                sock.bind((self.host, 0))
                self.port = int(sock.getsockname()[1])
        container = Container(self._handler)
        self._container = container
        self._handler.container = container
        self._handler.acceptor = container.listen(f"{self.host}:{self.port}")
        container.selectable(self._injector)

        def run() -> None:
            try:
                container.run()
            except BaseException as exc:
                self._error = exc
                log.exception("fake Service Bus: the event loop died")

        self._thread = threading.Thread(target=run, name=f"fake-servicebus-{self.port}", daemon=True)
        self._thread.start()
        self._management.start()
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            with contextlib.suppress(OSError), socket.create_connection((self.host, self.port), timeout=0.5):
                return self
            time.sleep(0.01)
        raise RuntimeError(f"the fake Service Bus did not start on {self.host}:{self.port}")

    def stop(self, timeout: float = 5.0) -> None:
        """Close every connection and stop the thread (idempotent)."""
        thread = self._thread
        if thread is None:
            return
        self._thread = None
        self._management.stop()
        if thread.is_alive():
            self._injector.trigger(ApplicationEvent("fake_stop"))
            thread.join(timeout)
        with contextlib.suppress(Exception):
            self._injector.close()

    def call(self, function: Callable[[], T], timeout: float = 10.0) -> T:
        """Run ``function`` on the server thread; its result (or its exception)."""
        if not self.running:
            return function()
        future: concurrent.futures.Future[T] = concurrent.futures.Future()
        self._injector.trigger(ApplicationEvent("fake_call", subject=(function, future)))
        return future.result(timeout)

    # -- fixture API ----------------------------------------------------------------------------
    def withhold_outcomes(self, withhold: bool = True) -> None:
        """Fault: from now on ignore (``withhold=True``) or answer again the client's settlements
        (complete, abandon, dead-letter; on receive links and through ``$management``) and its
        other ``$management`` requests; ignored settlements are never applied, so their messages
        come back when their locks expire."""

        def switch() -> None:
            self._handler.withhold_outcomes = withhold

        self.call(switch)

    def create_queue(self, name: str, **options: Any) -> None:
        """Create queue ``name`` with :class:`EntityOptions` fields as keywords."""
        opts = EntityOptions(**options) if options else None
        self.call(lambda: self.namespace.create_queue(name, opts))

    def create_topic(
        self, name: str, subscriptions: tuple[str, ...] | list[str] = (), **options: Any
    ) -> None:
        """Create topic ``name`` and its ``subscriptions`` (with ``options`` as their EntityOptions)."""
        opts = EntityOptions(**options) if options else None

        def create() -> None:
            self.namespace.create_topic(name)
            for sub in subscriptions:
                self.namespace.create_subscription(name, sub, opts)

        self.call(create)

    def create_subscription(self, topic: str, name: str, **options: Any) -> None:
        """Create subscription ``name`` of ``topic``."""
        opts = EntityOptions(**options) if options else None
        self.call(lambda: self.namespace.create_subscription(topic, name, opts))

    def update(self, path: str, **changes: Any) -> None:
        """Change a queue's or subscription's options (``lock_duration=2.0``, ...)."""
        self.call(lambda: self.namespace.update(path, **changes))

    def count(self, path: str, state: str | None = None) -> int:
        """Messages in the queue, subscription or dead-letter queue at ``path`` (optionally by state)."""
        return self.call(lambda: self.namespace.queue(path).count(state))

    def dead_letters(self, path: str) -> list[dict[str, Any]]:
        """The dead-letter queue of ``path``: body, application properties and delivery count of each."""

        def read() -> list[dict[str, Any]]:
            queue = self.namespace.queue(path).dead_letter_queue
            assert queue is not None
            return [
                {
                    "body": bytes(s.message.body) if s.message.body is not None else None,
                    "properties": dict(s.message.properties or {}),
                    "delivery_count": s.delivery_count,
                }
                for _, s in sorted(queue.messages.items())
            ]

        return self.call(read)
