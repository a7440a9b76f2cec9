"""What each ``broker`` sub-command does."""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import logging
import signal
import sys
import uuid
from datetime import datetime
from typing import Any

from broker import typed
from broker.backend import Backend
from broker.connect import _factory, available_backends, connect
from broker.driver.clock import clock
from broker.driver.settings import parse_url, redact_url
from broker.errors import BrokerError, ConfigError, DecodeError, EncodeError
from broker.message import Message, OutboundMessage, Record
from broker.run import run
from broker.typed import cloudevents
from broker.typed.formats import CONTENT_TYPE, format_of

__all__ = [
    "CommandError",
    "CommandFailed",
    "backends",
    "configure_logging",
    "consume",
    "demo",
    "dev",
    "publish",
    "queue_tracker",
]


class CommandError(Exception):
    """A user-facing failure: printed without a traceback, exit status 2."""

    #: The exit status ``broker`` returns for it.
    status = 2


class CommandFailed(CommandError):
    """A long-running command died of a runtime failure (not a usage error): exit status 1."""

    status = 1


def configure_logging(verbose: bool) -> None:
    """Log to stderr: warnings, or everything with ``--verbose``."""
    logging.basicConfig(
        level=logging.DEBUG if verbose else logging.WARNING,
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _connect(url: str) -> Backend:
    try:
        return connect(url)
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc


def _say(text: str = "") -> None:
    print(text, flush=True)


# -- demo ---------------------------------------------------------------------------------------
async def demo(args: argparse.Namespace) -> int:
    """Publish a few orders, consume them with ack and nack, show redelivery and replay."""
    backend = _connect(args.url)
    caps = backend.capabilities
    run = uuid.uuid4().hex[:6]
    topic = "orders" if backend.name == "inmem" else f"orders-{run}"
    _say(f"polybroker demo on {redact_url(args.url)} (backend {backend.name!r})")
    _say(f"capabilities: {', '.join(caps.supported()) or 'none'}")
    _say()
    orders = [
        OutboundMessage(
            json.dumps({"order": i, "item": item}).encode(), key=customer, attributes={"kind": "order"}
        )
        for i, (customer, item) in enumerate(
            [("alice", "tea"), ("bob", "coffee"), ("alice", "cake"), ("carol", "bagel"), ("bob", "juice")], 1
        )
    ]
    async with backend:
        if caps.messages:
            await _demo_messages(backend, topic, orders)
        if caps.records:
            await _demo_records(backend, topic, orders, publish=not caps.messages)
        if not caps.messages and not caps.records:
            raise CommandError(f"the {backend.name} backend offers no consumer to demo")
    _say()
    _say("Done. Every message was handled; none was lost. Next: `broker --help`, or the README.")
    return 0


async def _demo_messages(backend: Backend, topic: str, orders: list[OutboundMessage]) -> None:
    caps = backend.capabilities
    options: dict[str, Any] = {}
    if caps.ack_deadline and backend.name == "inmem":
        options["ack_deadline"] = 1.0
    async with backend.messages(topic, "billing", **options) as consumer:
        try:  # some brokers keep messages only for subscriptions that already exist
            early = await consumer.next_message(timeout=0.2)
            await early.nack()
        except TimeoutError:
            pass
        _say(f"1. publish: {len(orders)} orders to topic {topic!r} in one batch_publish()")
        await backend.publisher().topic(topic).batch_publish(*orders)
        for order in orders:
            _say(f"     sent   key={order.key:<6} {order.data.decode()}")
        _say()
        _say("2. consume with per-message acknowledgement (subscription 'billing')")
        handled: set[bytes] = set()
        failed_once = False
        held: Message | None = None
        started = clock.monotonic()
        while len(handled) < len(orders):
            message = await consumer.next_message(timeout=30)
            body = json.loads(message.data)
            note = f"attempt {message.delivery_attempt}" if message.delivery_attempt else "delivered"
            if body["order"] == 3 and not failed_once and caps.nack_redelivers:
                failed_once = True
                _say(f"     order {body['order']}: handler failed ({note}) -> nack(): it will be redelivered")
                await message.nack()
                continue
            if body["order"] == 4 and held is None and caps.ack_deadline and backend.name == "inmem":
                held = message
                _say(
                    f"     order {body['order']}: taken, never acked ({note}) -> back after the ack deadline"
                )
                continue
            _say(f"     order {body['order']}: handled ({note}) -> ack()")
            await message.ack()
            handled.add(message.data)
        _say(f"   all {len(orders)} orders handled in {clock.monotonic() - started:.1f}s")


async def _demo_records(
    backend: Backend, topic: str, orders: list[OutboundMessage], *, publish: bool
) -> None:
    log_topic = f"{topic}-log"
    _say()
    _say(f"3. the same orders as a partitioned log (topic {log_topic!r}, consumer group 'audit')")
    await backend.publisher().topic(log_topic).batch_publish(*orders)
    async with backend.records(log_topic, "audit") as records:
        seen: list[Record] = []
        while len(seen) < len(orders):
            record = await records.next_record(timeout=30)
            seen.append(record)
            value = (record.value or b"").decode(errors="replace")
            _say(f"     partition {record.partition} offset {record.offset}: key={record.key:<6} {value}")
        await seen[-1].ack()
        _say("   record.ack() commits that offset and every earlier one of its partition")


# -- publish ------------------------------------------------------------------------------------
def _parse_attributes(pairs: list[str]) -> dict[str, str]:
    attributes = {}
    for pair in pairs:
        name, sep, value = pair.partition("=")
        if not sep or not name:
            raise CommandError(f"attribute {pair!r} is not NAME=VALUE")
        attributes[name] = value
    return attributes


def _message_from_json(line: str, number: int) -> OutboundMessage:
    try:
        doc = json.loads(line)
    except ValueError as exc:
        raise CommandError(f"line {number} is not JSON: {exc}") from exc
    if not isinstance(doc, dict) or "data" not in doc:
        raise CommandError(f'line {number}: expected an object with "data"')
    data = doc["data"]
    if doc.get("base64"):
        payload = base64.b64decode(data)
    elif isinstance(data, str):
        payload = data.encode()
    else:
        payload = json.dumps(data).encode()
    attributes = doc.get("attributes") or {}
    if not isinstance(attributes, dict) or not all(isinstance(v, str) for v in attributes.values()):
        raise CommandError(f"line {number}: attributes must be an object of strings")
    return OutboundMessage(payload, key=doc.get("key"), attributes=attributes)


def _json_line(line: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise CommandError(f"line {number} is not JSON: {exc}") from exc


#: Context attributes of the JSON event format a ``--cloudevents`` line may give.
_EVENT_FIELDS = ("id", "source", "type", "specversion", "subject", "dataschema", "datacontenttype")


def _event_from_json(line: str, number: int) -> cloudevents.CloudEvent[Any]:
    """A CloudEvent from one line in the JSON event format (``data`` a JSON value)."""
    doc = _json_line(line, number)
    if not isinstance(doc, dict):
        raise CommandError(f"line {number}: a CloudEvent is a JSON object")
    if "data_base64" in doc:
        raise CommandError(f'line {number}: give "data" as a JSON value ("data_base64" is not read)')
    fields = {name: doc.pop(name) for name in _EVENT_FIELDS if name in doc}
    for name in ("type", "source"):
        if not isinstance(fields.get(name), str):
            raise CommandError(f'line {number}: a CloudEvent needs a string "{name}"')
    when = doc.pop("time", None)
    try:
        time = datetime.fromisoformat(when.upper()) if isinstance(when, str) else None
    except ValueError as exc:
        raise CommandError(f"line {number}: time {when!r} is not an RFC 3339 timestamp") from exc
    data = doc.pop("data", None)
    fields.setdefault("id", str(uuid.uuid4()))
    event: cloudevents.CloudEvent[Any] = cloudevents.CloudEvent(data=data, extensions=doc, **fields)
    if time is not None:
        event.time = time
    return event


def _typed_message(
    line: str,
    number: int,
    args: argparse.Namespace,
    handle: typed.TypedTopic[Any],
    attributes: dict[str, str],
) -> OutboundMessage:
    """A typed message from one line: a JSON value, or with ``--json`` the value of its "data"."""
    key = args.key
    if args.json:
        doc = _json_line(line, number)
        if not isinstance(doc, dict) or "data" not in doc:
            raise CommandError(f'line {number}: expected an object with "data"')
        value = doc["data"]
        key = doc.get("key", key)
        own = doc.get("attributes") or {}
        if not isinstance(own, dict) or not all(isinstance(v, str) for v in own.values()):
            raise CommandError(f"line {number}: attributes must be an object of strings")
        attributes = {**attributes, **own}
    else:
        value = _json_line(line, number)
    return handle.message(value, key=key, attributes=attributes or None)


async def publish(args: argparse.Namespace) -> int:
    """Publish every line of stdin to the topic (raw, typed or as CloudEvents)."""
    attributes = _parse_attributes(args.attribute)
    mode = getattr(args, "cloudevents", None)
    fmt = getattr(args, "typed", None)
    if mode and args.json:
        raise CommandError("--cloudevents reads one event per line in the JSON event format: drop --json")
    backend = _connect(args.url)
    count = 0
    async with backend:
        topic = backend.publisher().topic(args.topic)
        data_binding = typed.binding(object, format=fmt or "json")
        handle = typed.TypedTopic(topic, data_binding)
        events = cloudevents.binding(data_binding, protocol=_protocol(backend), mode=mode) if mode else None
        batch: list[OutboundMessage] = []
        for number, raw in enumerate(sys.stdin, 1):
            line = raw.rstrip("\n")
            try:
                if events is not None:
                    if not line.strip():
                        continue
                    event = _event_from_json(line, number)
                    message = events.message(event, key=args.key, attributes=attributes or None)
                elif fmt:
                    if not line.strip():
                        continue
                    message = _typed_message(line, number, args, handle, attributes)
                elif args.json:
                    if not line.strip():
                        continue
                    message = _message_from_json(line, number)
                    if args.key and message.key is None:
                        message.key = args.key
                    if attributes:
                        message.attributes = {**attributes, **message.attributes}
                else:
                    message = OutboundMessage(line.encode(), key=args.key, attributes=attributes)
            except EncodeError as exc:
                raise CommandError(f"line {number}: {exc}") from exc
            batch.append(message)
            if len(batch) >= 500:
                await topic.batch_publish(*batch)
                count += len(batch)
                batch = []
        if batch:
            await topic.batch_publish(*batch)
            count += len(batch)
    print(f"published {count} message(s) to {args.topic!r}", file=sys.stderr)
    return 0


def _protocol(backend: Backend) -> cloudevents.Protocol:
    try:
        return cloudevents.protocol_of(backend)
    except ConfigError:
        return "http"  # a backend of a third party: string attributes, as the HTTP binding


# -- consume ------------------------------------------------------------------------------------
def _plain(value: Any) -> Any:
    """``value`` as JSON can show it (bytes as base64, datetimes as RFC 3339)."""
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode()
    if isinstance(value, datetime):
        text = value.isoformat()
        return text[:-6] + "Z" if text.endswith("+00:00") else text
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


class _Decoder:
    """Decodes what ``consume --format json`` shows: a CloudEvent's attributes and data, or a typed
    message's value (a JSON or MessagePack content type)."""

    def __init__(self, backend: Backend) -> None:
        self.values = typed.binding(object)
        self.events = cloudevents.binding(self.values, protocol=_protocol(backend))
        self.specversion = (cloudevents.BINDING_PREFIXES[self.events.protocol] + "specversion").lower()

    def _is_event(self, item: Message | Record) -> bool:
        content_type = item.attributes.get(CONTENT_TYPE, "")
        if content_type.lower().startswith("application/cloudevents"):
            return True
        return any(
            name.lower() in (self.specversion, "cloudevents:specversion", "cloudevents_specversion")
            for name in item.attributes
        )

    def add(self, doc: dict[str, Any], item: Message | Record, data: bytes) -> None:
        """Add ``cloudevent`` and ``value`` (or ``decode_error``) to ``doc``."""
        try:
            if self._is_event(item):
                event = self.events.decode_received(item, data)
                if event is not None:
                    doc["cloudevent"] = event.attributes()
                    doc["value"] = event.data
                return
            content_type = item.attributes.get(CONTENT_TYPE)
            if content_type is not None and format_of(content_type) is not None:
                doc["value"] = self.values.decode(data, content_type)
        except DecodeError as exc:
            doc["decode_error"] = str(exc)


def _render(item: Message | Record, as_json: bool, decoder: _Decoder | None = None) -> str:
    if isinstance(item, Message):
        data = item.data
        doc: dict[str, Any] = {"id": item.id, "key": item.key, "attributes": dict(item.attributes)}
        if item.delivery_attempt is not None:
            doc["delivery_attempt"] = item.delivery_attempt
    else:
        data = item.value or b""
        doc = {
            "partition": item.partition,
            "offset": item.offset,
            "key": item.key,
            "attributes": dict(item.attributes),
        }
    if not as_json:
        return data.decode(errors="replace")
    try:
        doc["data"] = data.decode()
    except UnicodeDecodeError:
        doc["data"] = base64.b64encode(data).decode()
        doc["base64"] = True
    if decoder is not None:
        decoder.add(doc, item, data)
    return json.dumps(doc, ensure_ascii=False, default=_plain)


async def consume(args: argparse.Namespace) -> int:
    """Print messages (or records) of the topic until --count, --timeout, SIGTERM or Ctrl-C.

    Messages are consumed by a receiver run with :func:`broker.run`: a signal stops it
    gracefully (handlers finish within --drain-timeout; what was taken and not printed is nacked).
    """
    backend = _connect(args.url)
    args.json = args.json or getattr(args, "format", "text") == "json"
    args.decoder = _Decoder(backend) if args.json else None
    caps = backend.capabilities
    if caps.messages:
        return await _consume_messages(backend, args)
    seen = 0
    async with backend:
        if not caps.records:
            raise CommandError(f"the {backend.name} backend offers no consumer")
        async with backend.records(args.topic, args.subscription) as source:
            while not args.count or seen < args.count:
                try:
                    record = await source.next_record(timeout=args.timeout)
                except TimeoutError:
                    break
                print(_render(record, args.json, args.decoder), flush=True)
                await record.ack()
                seen += 1
    print(f"consumed {seen} message(s)", file=sys.stderr)
    return 0


async def _consume_messages(backend: Backend, args: argparse.Namespace) -> int:
    seen = 0
    last = clock.monotonic()
    stop = asyncio.Event()
    count: int = args.count
    drain_timeout: float = getattr(args, "drain_timeout", 30.0)
    try:
        receiver = backend.receiver(
            args.topic,
            args.subscription,
            concurrency=getattr(args, "concurrency", 1),
            drain_timeout=drain_timeout,
        )
    except BrokerError as exc:
        await backend.close()
        raise CommandError(str(exc)) from exc

    async def handler(message: Message) -> None:
        nonlocal seen, last
        if count and seen >= count:  # taken after the last one we wanted: give it back
            await message.nack()
            return
        seen += 1
        last = clock.monotonic()
        print(_render(message, args.json, args.decoder), flush=True)
        if args.no_ack:
            await message.nack()
        else:
            await message.ack()
        if count and seen >= count:
            stop.set()

    async def watch_idle(timeout: float) -> None:
        while not stop.is_set():
            idle = clock.monotonic() - last
            if idle >= timeout:
                stop.set()
                return
            await asyncio.sleep(min(timeout - idle, 0.5))

    watchdog = asyncio.ensure_future(watch_idle(args.timeout)) if args.timeout is not None else None
    print(f"consuming {args.topic!r} as {args.subscription!r} (Ctrl-C to stop)", file=sys.stderr, flush=True)
    try:
        code = await run((receiver, handler), backends=[backend], drain_timeout=drain_timeout, stop=stop)
    except BrokerError as exc:  # the backend's ping at start: a wrong host or password
        raise CommandFailed(str(exc)) from exc
    finally:
        if watchdog is not None:
            watchdog.cancel()
    print(f"consumed {seen} message(s)", file=sys.stderr)
    if code:
        raise CommandFailed("the consumer stopped on an error (see the log above)")
    return 0


# -- dev ----------------------------------------------------------------------------------------
async def dev(args: argparse.Namespace) -> int:
    """Start the backend's local server and wait for Ctrl-C."""
    scheme = args.backend.lower().removesuffix("://")
    try:
        factory = _factory(scheme)
    except BrokerError as exc:
        raise CommandError(str(exc)) from exc
    start = getattr(factory, "dev_server", None)
    if start is None:
        raise CommandError(f"the {scheme} backend has no local development server")
    server = start(port=args.port)
    try:
        await asyncio.to_thread(server.start)
    except BrokerError as exc:
        raise CommandError(f"could not start the {scheme} server: {exc}") from exc
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        print(server.url, flush=True)
        print(f"{scheme} server running at {server.url} (Ctrl-C to stop)", file=sys.stderr, flush=True)
        await stop.wait()
    finally:
        server.stop()
        print("stopped", file=sys.stderr)
    return 0


# -- queue tracker ------------------------------------------------------------------------------
async def queue_tracker(args: argparse.Namespace) -> int:
    """Run the backend's redelivery tracker for a topic until Ctrl-C."""
    backend = _connect(args.url)
    options = {
        name: value
        for name, value in (
            ("marker_topic", args.marker_topic),
            ("ack_deadline", args.ack_deadline),
            ("max_attempts", args.max_attempts),
            ("dead_letter_topic", args.dead_letter_topic),
            ("tracker_group", args.group),
            ("go_fleet", True if args.go_fleet else None),
        )
        if value is not None
    }
    max_failures: int = getattr(args, "max_failures", 10)
    if max_failures < 0:
        raise CommandError(f"--max-failures must be >= 0, got {max_failures}")
    stop = asyncio.Event()
    give_up = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    async with backend:
        try:
            tracker = backend.queue_tracker(args.topic, **options)
        except BrokerError as exc:
            raise CommandError(str(exc)) from exc

        def on_failure(error: BaseException) -> None:
            if max_failures and tracker.failure_streak >= max_failures:
                give_up.set()

        tracker.on_failure = on_failure
        print(
            f"tracking {args.topic!r} (markers on {tracker.config.marker_topic!r}, group "
            f"{tracker.config.tracker_group!r}); Ctrl-C to stop",
            file=sys.stderr,
        )
        task = tracker.start()
        waiters = [asyncio.ensure_future(stop.wait()), asyncio.ensure_future(give_up.wait())]
        try:
            done, _ = await asyncio.wait([task, *waiters], return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiter in waiters:
                waiter.cancel()
        requested = stop.is_set()
        streak, last_error = tracker.failure_streak, tracker.last_error
        await tracker.close()
        # The supervised task never ends with an error (it restarts the loop after each failure,
        # counting them): failures end the command through --max-failures, a closed log below.
        if give_up.is_set() and not requested:
            raise CommandFailed(f"the tracker failed {streak} times in a row; giving up: {last_error!r}")
        if task in done and not requested:
            raise CommandFailed("the tracker stopped on its own (its connection was closed)")
        counts = dict(tracker.metrics.counts)
    print(
        f"stopped; redelivered {counts.get('redelivered', 0)}, "
        f"dead-lettered {counts.get('dead_lettered', 0)}",
        file=sys.stderr,
    )
    return 0


# -- backends -----------------------------------------------------------------------------------
async def backends(args: argparse.Namespace) -> int:
    """List registered backends and their capabilities (or why they can't load)."""
    if getattr(args, "matrix", False):
        from broker.cli.matrix import capability_matrix

        print(await capability_matrix())
        return 0
    for scheme in available_backends():
        try:
            factory = _factory(scheme)
            example = f"{scheme}://" + ("default" if scheme == "inmem" else "...")
            parse_url(example)
            backend = factory.open(factory.settings_type()) if scheme == "inmem" else None
            caps = backend.capabilities.supported() if backend is not None else None
            line = f"{scheme:<12} installed"
            if caps is not None:
                line += f"  ({', '.join(caps)})"
            print(line)
        except (BrokerError, ConfigError, TypeError) as exc:
            print(f"{scheme:<12} unavailable: {exc}")
    return 0
