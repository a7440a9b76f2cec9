"""CloudEvents 1.0 on every backend: binary and structured content modes, typed data inside.

A :class:`CloudEvent` carries the context attributes (``id``, ``source``, ``type``,
``specversion``, and the optional ``time``, ``subject``, ``dataschema``, ``datacontenttype``),
the extension attributes, and ``data`` of the application's type, encoded and decoded with a
type binding (:func:`broker.typed.binding`)::

    from broker.typed import cloudevents

    events = cloudevents.topic(backend.publisher(), "orders", Order, protocol=backend)  # binary
    await events.publish(cloudevents.CloudEvent("com.example.order", "/shop", Order(1, 9.5)))

    bound = cloudevents.binding(Order, protocol=backend)                # both modes on receive
    async with typed.messages(backend.messages("orders", "billing"), bound) as consumer:
        async for message in consumer:                                  # TypedMessage[CloudEvent[Order]]
            print(message.decoded.type, message.decoded.data)

Binary mode puts the context attributes in the message's attributes (headers, properties) and
the data, as the binding encodes it, in the payload, with ``datacontenttype`` as the
``content-type`` attribute. Structured mode sends the whole event as
``application/cloudevents+json`` (JSON data inline, any other data as ``data_base64``).
Attribute naming follows the protocol bindings, as the ``cloudevents`` SDK implements them:

- Kafka: ``ce_<name>`` headers (values as they are);
- Service Bus (AMQP): ``cloudEvents_<name>`` application properties; ``cloudEvents:<name>`` is
  read too, and ``time`` as an integer of milliseconds since the epoch (an AMQP timestamp);
- RabbitMQ: ``ce-<name>`` headers (values as they are), as the SDK's RabbitMQ binding;
- NATS JetStream, Google Pub/Sub, Pulsar and the in-memory broker (no binding in the SDK):
  ``ce-<name>`` attributes percent-encoded as in the HTTP binding.

The ``partitionkey`` extension is the message key when no key is given. On receive the mode is
told by the ``content-type`` (``application/cloudevents...`` is structured); a message missing a
required attribute, or carrying one that is malformed, is a :class:`~broker.errors.DecodeError`,
raised when ``decoded`` is read. Only CloudEvents 1.0 is read and written.

The implementation does not need the ``cloudevents`` package; the tests check interoperability
against it.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Generic, Literal, TypeVar
from urllib.parse import quote, unquote

from broker.driver.clock import clock
from broker.errors import ConfigError, DecodeError, EncodeError
from broker.interfaces import Publisher, Topic
from broker.message import Message, OutboundMessage, has_native_properties, own_acker
from broker.typed.binding import Binding, ensure_binding
from broker.typed.formats import CONTENT_TYPE, media_type
from broker.typed.publishing import TypedTopic

__all__ = [
    "BINDING_PREFIXES",
    "PROTOCOLS",
    "STRUCTURED_CONTENT_TYPE",
    "CloudEvent",
    "CloudEventBinding",
    "CloudEventTopic",
    "Mode",
    "Protocol",
    "binding",
    "protocol_of",
    "topic",
]

T = TypeVar("T")

#: How a CloudEvent travels: attributes in headers (binary) or the whole event in the payload.
Mode = Literal["binary", "structured"]
#: The protocol binding whose attribute naming is used: see :data:`PROTOCOLS`.
Protocol = Literal["kafka", "amqp", "rabbitmq", "http"]

#: The content type of a structured-mode event in the JSON event format.
STRUCTURED_CONTENT_TYPE: Final = "application/cloudevents+json"

#: Backend name (``Backend.name``) or binding name -> the protocol binding it follows.
PROTOCOLS: Final[Mapping[str, Protocol]] = {
    "kafka": "kafka",
    "servicebus": "amqp",
    "amqp": "amqp",
    "rabbitmq": "rabbitmq",
    "nats": "http",
    "pubsub": "http",
    "pulsar": "http",
    "inmem": "http",
    "redis": "http",
    "sqs": "http",  # SQS/SNS message attributes (at most 10: large events go structured)
    "http": "http",
}

#: The attribute-name prefix written in binary mode, per protocol binding.
BINDING_PREFIXES: Final[Mapping[Protocol, str]] = {
    "kafka": "ce_",
    "amqp": "cloudEvents_",
    "rabbitmq": "ce-",
    "http": "ce-",
}

#: Prefixes read in binary mode (lower-cased; names are matched without regard to case).
_READ_PREFIXES: Final[Mapping[Protocol, tuple[str, ...]]] = {
    "kafka": ("ce_",),
    "amqp": ("cloudevents_", "cloudevents:"),
    "rabbitmq": ("ce-",),
    "http": ("ce-",),
}

_SPECVERSION: Final = "1.0"
_REQUIRED: Final = ("id", "source", "type", "specversion")
_OPTIONAL: Final = ("datacontenttype", "dataschema", "subject", "time")
_CONTEXT: Final = frozenset(_REQUIRED + _OPTIONAL)
_RESERVED: Final = _CONTEXT | {"data", "data_base64"}
_NAME: Final = re.compile(r"^[a-z0-9]+$")
_JSON_MEDIA: Final = re.compile(r"^(application|text)/([a-z0-9.\-]+\+)?json$")
#: Characters the HTTP binding leaves as they are: printable ASCII but space, '"' and '%'.
_HTTP_SAFE: Final = "".join(c for c in map(chr, range(0x21, 0x7F)) if c not in ('"', "%"))
_PARTITIONKEY: Final = "partitionkey"


def _now() -> datetime:
    return datetime.fromtimestamp(clock.time(), UTC)  # the one clock: virtual in tests that make it so


def _new_id() -> str:
    return str(uuid.uuid4())


@dataclass(slots=True)
class CloudEvent(Generic[T]):
    """A CloudEvents 1.0 event whose ``data`` is a value of ``T``.

    ``id`` defaults to a new UUID and ``time`` to now (UTC, read from :data:`broker.driver.clock.clock`),
    as the reference SDK does; pass ``time=None`` for an event without one. ``extensions`` maps
    extension attribute names (lower-case letters and digits) to strings, integers, booleans,
    bytes or datetimes. On receive in binary mode an extension comes back as a string (headers
    carry text), except where the broker keeps types (AMQP properties on Service Bus and
    RabbitMQ).
    """

    type: str
    source: str
    data: T | None = None
    id: str = field(default_factory=_new_id)
    time: datetime | None = field(default_factory=_now)
    subject: str | None = None
    dataschema: str | None = None
    datacontenttype: str | None = None
    specversion: str = _SPECVERSION
    extensions: Mapping[str, Any] = field(default_factory=dict)

    def attributes(self) -> dict[str, Any]:
        """Every context attribute that is set, extensions included, by name (not ``data``)."""
        out: dict[str, Any] = {
            "specversion": self.specversion,
            "id": self.id,
            "source": self.source,
            "type": self.type,
        }
        for name in _OPTIONAL:
            value = getattr(self, name)
            if value is not None:
                out[name] = value
        out.update(self.extensions)
        return out


# -- protocols ---------------------------------------------------------------------------------
def protocol_of(target: Any) -> Protocol:
    """The protocol binding for ``target``: a backend (its ``name``), a backend name (``kafka``,
    ``servicebus``, ``rabbitmq``, ``nats``, ``pubsub``, ``pulsar``, ``redis``, ``inmem``) or a binding name
    (``kafka``, ``amqp``, ``rabbitmq``, ``http``). ``ConfigError`` for anything else."""
    name = target if isinstance(target, str) else getattr(target, "name", None)
    found = PROTOCOLS.get(name) if isinstance(name, str) else None
    if found is None:
        raise ConfigError(
            f"no CloudEvents protocol binding for {target!r}: pass protocol= one of "
            f"{', '.join(sorted(PROTOCOLS))} (a broker with string headers: 'http')"
        )
    return found


def _time_text(value: datetime) -> str:
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    text = value.isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def _text(value: Any) -> str:
    """The canonical string form of an attribute value (CloudEvents type system)."""
    if isinstance(value, str):
        return value
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, datetime):
        return _time_text(value)
    if isinstance(value, bytes | bytearray):
        return base64.b64encode(value).decode("ascii")
    raise EncodeError(f"a CloudEvents attribute cannot be a {type(value).__name__}: {value!r}")


def _parse_time(value: Any, protocol: Protocol) -> datetime:
    if isinstance(value, datetime):
        return value if value.tzinfo is not None else value.replace(tzinfo=UTC)
    if protocol == "amqp" and (isinstance(value, int) or (isinstance(value, str) and value.isdigit())):
        return datetime.fromtimestamp(int(value) / 1000, UTC)  # an AMQP timestamp: ms since the epoch
    if isinstance(value, str):
        try:
            return datetime.fromisoformat(value.upper())
        except ValueError:
            pass
    raise ValueError(f"'time' is not an RFC 3339 timestamp: {value!r}")


def _check(event: CloudEvent[Any]) -> None:
    for name in ("id", "source", "type"):
        value = getattr(event, name)
        if not isinstance(value, str) or not value:
            raise EncodeError(f"a CloudEvent needs a non-empty string {name!r}, got {value!r}")
    for name in ("subject", "dataschema", "datacontenttype"):
        value = getattr(event, name)
        if value is not None and not isinstance(value, str):
            raise EncodeError(f"the CloudEvent attribute {name!r} is a string, got {value!r}")
    if event.time is not None and not isinstance(event.time, datetime):
        raise EncodeError(f"the CloudEvent attribute 'time' is a datetime, got {event.time!r}")
    if event.specversion != _SPECVERSION:
        raise EncodeError(f"only CloudEvents {_SPECVERSION} is written, not {event.specversion!r}")
    for name in event.extensions:
        if name in _RESERVED or not _NAME.match(name):
            raise EncodeError(
                f"{name!r} cannot be an extension attribute: lower-case letters and digits, "
                "not a context attribute's name"
            )


# -- encoding ------------------------------------------------------------------------------------
def _is_json(content_type: str | None) -> bool:
    return content_type is None or _JSON_MEDIA.match(media_type(content_type)) is not None


def _binary(
    event: CloudEvent[T], data_binding: Binding[T], protocol: Protocol
) -> tuple[bytes, dict[str, str]]:
    prefix = BINDING_PREFIXES[protocol]
    percent = protocol == "http"
    attributes: dict[str, str] = {}
    data = b""
    content_type = event.datacontenttype
    if event.data is not None:
        data = data_binding.encode(event.data)
        if content_type is None:
            content_type = data_binding.content_type
    for name, value in event.attributes().items():
        if name == "datacontenttype":
            continue
        text = _text(value)
        attributes[prefix + name] = quote(text, safe=_HTTP_SAFE) if percent else text
    if content_type is not None:
        attributes[CONTENT_TYPE] = content_type
    return data, attributes


def _structured(event: CloudEvent[T], data_binding: Binding[T]) -> bytes:
    envelope: dict[str, Any] = {}
    for name, value in event.attributes().items():
        if isinstance(value, datetime):
            envelope[name] = _time_text(value)
        elif isinstance(value, bytes | bytearray):
            envelope[name] = base64.b64encode(value).decode("ascii")
        elif isinstance(value, str | int | bool):
            envelope[name] = value
        else:
            raise EncodeError(f"a CloudEvents attribute cannot be a {type(value).__name__}: {value!r}")
    if event.data is None:
        return json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()
    payload = data_binding.encode(event.data)
    content_type = event.datacontenttype or data_binding.content_type
    envelope["datacontenttype"] = content_type
    head = json.dumps(envelope, ensure_ascii=False, separators=(",", ":")).encode()
    if _is_json(content_type):
        return head[:-1] + b',"data":' + payload + b"}"  # the encoded JSON, inline as it is
    data_base64 = base64.b64encode(payload).decode("ascii")
    return head[:-1] + b',"data_base64":"' + data_base64.encode("ascii") + b'"}'


# -- decoding ------------------------------------------------------------------------------------
def _require(found: Mapping[str, Any]) -> None:
    missing = [name for name in _REQUIRED if found.get(name) in (None, "")]
    if missing:
        raise ValueError(f"not a CloudEvent: required attribute(s) missing: {', '.join(missing)}")


def _event(found: dict[str, Any], data: Any, protocol: Protocol) -> CloudEvent[Any]:
    """The event of the context attributes in ``found`` (raw values as received) and ``data``."""
    _require(found)
    core: dict[str, Any] = {}
    for name in ("id", "source", "type", "specversion", "subject", "dataschema", "datacontenttype"):
        value = found.pop(name, None)
        if isinstance(value, bytes):
            value = value.decode("utf-8")
        if value is not None and not isinstance(value, str):
            raise ValueError(f"attribute {name!r} is not a string: {value!r}")
        core[name] = value
    if core["specversion"] != _SPECVERSION:
        raise ValueError(f"unsupported CloudEvents specversion {core['specversion']!r} (1.0 is read)")
    time = found.pop("time", None)
    return CloudEvent(
        type=core["type"],
        source=core["source"],
        data=data,
        id=core["id"],
        time=None if time is None else _parse_time(time, protocol),
        subject=core["subject"],
        dataschema=core["dataschema"],
        datacontenttype=core["datacontenttype"],
        specversion=core["specversion"],
        extensions=found,
    )


class CloudEventBinding(Binding[CloudEvent[T]], Generic[T]):
    """A :class:`~broker.typed.Binding` of :class:`CloudEvent` values whose data is bound by
    ``data_binding``, for the attribute naming of ``protocol`` (see the module docstring).

    It makes typed consumers (``typed.messages``, ``typed.receiver``, ...) hand out messages whose
    ``decoded`` is the received event, in either mode; :meth:`message` builds the outbound message
    of an event in :attr:`mode`. As a plain binding (``encode`` / ``decode``, a ``TypedTopic``,
    :func:`broker.typed.binding_codec`) it reads and writes structured-mode payloads.
    """

    __slots__ = ("data_binding", "mode", "protocol")

    def __init__(self, data_binding: Binding[T], protocol: Protocol, mode: Mode = "binary") -> None:
        if mode not in ("binary", "structured"):
            raise ConfigError(f"mode must be 'binary' or 'structured', got {mode!r}")
        if protocol not in BINDING_PREFIXES:
            raise ConfigError(f"protocol must be one of {', '.join(BINDING_PREFIXES)}, got {protocol!r}")
        #: The binding of the events' data.
        self.data_binding = data_binding
        #: The protocol binding whose attribute names are written and read.
        self.protocol: Protocol = protocol
        #: The content mode :meth:`message` publishes in.
        self.mode: Mode = mode
        self._decoders = {}
        self.codec = None
        self.target = CloudEvent
        self.format = "cloudevents"
        self.engine = None
        self.content_type = STRUCTURED_CONTENT_TYPE
        self.encoder = self._encode_structured
        self.decoder = self._decode_structured

    def __repr__(self) -> str:
        return f"<CloudEventBinding {self.protocol} {self.mode} of {self.data_binding!r}>"

    # -- publishing
    def message(
        self,
        event: CloudEvent[T],
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        mode: Mode | None = None,
    ) -> OutboundMessage:
        """The :class:`~broker.OutboundMessage` carrying ``event`` in ``mode`` (default :attr:`mode`).

        ``key`` defaults to the ``partitionkey`` extension; ``attributes`` are added (they do not
        replace the event's). Raises :class:`~broker.errors.EncodeError` for an event that is not
        valid or whose data does not encode.
        """
        _check(event)
        if key is None:
            partition_key = event.extensions.get(_PARTITIONKEY)
            if partition_key is not None:
                key = _text(partition_key)
        if (mode or self.mode) == "binary":
            data, own = _binary(event, self.data_binding, self.protocol)
        else:
            data, own = _structured(event, self.data_binding), {CONTENT_TYPE: STRUCTURED_CONTENT_TYPE}
        if attributes:
            own = {**attributes, **own}
        return OutboundMessage(data, key, own)

    def _encode_structured(self, event: CloudEvent[T]) -> bytes:
        _check(event)
        return _structured(event, self.data_binding)

    # -- receiving
    def decoder_for(self, content_type: str) -> Any:
        """The structured-mode decoder for ``application/cloudevents+json``; ``DecodeError`` else."""
        if media_type(content_type) != STRUCTURED_CONTENT_TYPE:
            raise DecodeError(
                f"content type {content_type!r} is not {STRUCTURED_CONTENT_TYPE!r}, the only event format "
                f"{self!r} decodes from bytes alone",
                content_type=content_type,
            )
        return self._decode_structured

    def _data(self, payload: bytes, content_type: str | None) -> T:
        binding = self.data_binding
        if content_type is None:
            return binding.decoder(payload)
        if binding.codec is None and _is_json(content_type):
            return binding.decoder_for("application/json")(payload)
        return binding.decoder_for(content_type)(payload)

    def _decode_structured(self, payload: bytes) -> CloudEvent[T]:
        envelope = json.loads(payload)
        if type(envelope) is not dict:
            raise ValueError(f"a structured CloudEvent is a JSON object, got {type(envelope).__name__}")
        _require(envelope)
        content_type = envelope.get("datacontenttype")
        data: Any = None
        if "data_base64" in envelope:
            raw = envelope.pop("data_base64")
            if not isinstance(raw, str):
                raise ValueError("'data_base64' is not a string")
            try:
                data = self._data(base64.b64decode(raw, validate=True), content_type)
            except binascii.Error as exc:
                raise ValueError(f"'data_base64' is not base64: {exc}") from exc
            envelope.pop("data", None)
        elif "data" in envelope:
            value = envelope.pop("data")
            if value is not None:
                if _is_json(content_type):
                    encoded = json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
                elif isinstance(value, str):
                    encoded = value.encode("utf-8")
                else:
                    raise ValueError(f"'data' of content type {content_type!r} is not a string")
                data = self._data(encoded, content_type)
        return _event(envelope, data, self.protocol)

    def _binary_event(self, received: Any, payload: bytes) -> CloudEvent[T]:
        prefixes = _READ_PREFIXES[self.protocol]
        percent = self.protocol == "http"
        found: dict[str, Any] = {}
        for name, value in received.attributes.items():
            lowered = name.lower()
            for prefix in prefixes:
                if lowered.startswith(prefix):
                    found[lowered[len(prefix) :]] = unquote(value) if percent else value
                    break
        if self.protocol in ("amqp", "rabbitmq") and isinstance(received, Message):
            acker = own_acker(received)
            if has_native_properties(acker):
                for name, value in acker.native_properties(received).items():
                    lowered = name.lower()
                    for prefix in prefixes:
                        if lowered.startswith(prefix):
                            found[lowered[len(prefix) :]] = value  # the type the broker gave it
                            break
        content_type = received.attributes.get(CONTENT_TYPE)
        found.pop("datacontenttype", None)
        found["datacontenttype"] = content_type
        _require(found)
        data = self._data(payload, content_type) if payload else None
        return _event(found, data, self.protocol)

    def decode_received(self, received: Any, data: bytes | None) -> CloudEvent[T] | None:
        """The event ``received`` (a Message or Record) carries in either mode; None for a tombstone.

        Raises :class:`~broker.errors.DecodeError` carrying ``received`` when it is no CloudEvent
        (a required attribute missing), an attribute is malformed, or the data does not decode.
        """
        if data is None:
            return None
        content_type = received.attributes.get(CONTENT_TYPE)
        try:
            if content_type is not None and media_type(content_type).startswith("application/cloudevents"):
                return self.decoder_for(content_type)(data)  # type: ignore[no-any-return]
            return self._binary_event(received, data)
        except Exception as exc:
            raise self.failure(exc, received, content_type) from exc

    def failure(self, exc: BaseException, received: Any, content_type: str | None) -> DecodeError:
        """The :class:`~broker.errors.DecodeError` for ``exc`` (raise it ``from exc``)."""
        if isinstance(exc, DecodeError) and exc.received is received and received is not None:
            exc.content_type = content_type
            return exc
        text = str(exc).strip().replace("\n", "; ")
        what = f"content type {content_type!r}" if content_type is not None else "no content type"
        return DecodeError(
            f"cannot decode a CloudEvent ({what}) with {self!r}: {text}",
            received=received,
            content_type=content_type,
        )


class CloudEventTopic(TypedTopic[CloudEvent[T]]):
    """A publishing handle for one topic whose messages are :class:`CloudEvent` values of ``T``.

    A :class:`~broker.typed.TypedTopic` whose messages are built by :meth:`CloudEventBinding.message`
    (the binding's mode and protocol: ``ce-`` attributes in binary mode, the JSON event format in
    structured mode).
    """

    __slots__ = ()

    _plain = False
    #: The binding events are written with (its mode and protocol).
    binding: CloudEventBinding[T]

    def __init__(self, topic: Topic, binding: CloudEventBinding[T]) -> None:
        super().__init__(topic, binding)

    def message(
        self, value: CloudEvent[T], *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> OutboundMessage:
        """The message carrying ``value`` (see :meth:`CloudEventBinding.message`)."""
        return self.binding.message(value, key=key, attributes=attributes)


def binding(data: Binding[T] | type[T], *, protocol: Any, mode: Mode = "binary") -> CloudEventBinding[T]:
    """A :class:`CloudEventBinding` of events whose data is ``data`` (a class or a binding).

    ``protocol`` is the backend the events travel on (a ``Backend``, or its name) or a protocol
    binding's name (``kafka``, ``amqp``, ``rabbitmq``, ``http``); see :func:`protocol_of`.
    ``mode`` is the content mode published; both modes are read.
    """
    return CloudEventBinding(ensure_binding(data), protocol_of(protocol), mode)


def topic(
    publisher: Publisher,
    name: str,
    data: Binding[T] | type[T],
    *,
    protocol: Any,
    mode: Mode = "binary",
) -> CloudEventTopic[T]:
    """A handle publishing :class:`CloudEvent` values with data of ``data`` to topic ``name``
    through ``publisher``, in ``mode``, named for ``protocol`` (the backend, or see
    :func:`protocol_of`)."""
    return CloudEventTopic(publisher.topic(name), binding(data, protocol=protocol, mode=mode))
