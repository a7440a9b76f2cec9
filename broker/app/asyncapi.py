"""The AsyncAPI 3.0 document of a :class:`broker.App`: what it receives and sends, and on which servers.

::

    document = broker.app.asyncapi.document(app, title="orders", version="1.0.0")   # a dict
    print(json.dumps(document, indent=2))

``broker asyncapi pkg.module:app`` writes the same document. It holds:

- ``servers``: one per backend of the app, from its URL with the credentials and the query string
  (settings, some secret) left out, and the AsyncAPI protocol of the broker;
- ``channels``: one per topic a subscriber consumes, publishes its output to (``publish_to``) or
  dead-letters to (a :class:`~broker.DeadLetterTopic`), with the messages that travel on it;
- ``operations``: a ``receive`` per subscriber (its subscription is the consumer group, the queue
  group, the queue), a ``send`` per output and per dead-letter topic;
- ``components``: the messages (content type and payload) and the payloads' JSON Schemas, taken from
  the subscribers' bindings (:mod:`broker.typed`): pydantic models, dataclasses, msgspec Structs,
  TypedDicts and unions, with their ``$defs`` hoisted to ``components.schemas``; Avro and JSON
  Schema texts and Protobuf classes of :mod:`broker.schemas` keep their own ``schemaFormat``;
- protocol ``bindings`` where AsyncAPI defines them: Kafka (consumer group, key), NATS (queue group),
  Google Pub/Sub, Pulsar (tenant, namespace, persistence) and AMQP (RabbitMQ's exchange and queue).

See ``docs/asyncapi.md``.
"""

from __future__ import annotations

import importlib
import json
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from broker.driver.settings import looks_like_connection_string, parse_url
from broker.errors import ConfigError
from broker.retry import DeadLetterTopic

if TYPE_CHECKING:
    from broker.app.application import App
    from broker.app.subscriber import Subscriber
    from broker.typed import Binding

__all__ = ["ASYNCAPI_VERSION", "PROTOCOLS", "document"]

#: The AsyncAPI version of the documents written here.
ASYNCAPI_VERSION = "3.0.0"

#: URL scheme -> (AsyncAPI protocol, protocol version or None).
PROTOCOLS: dict[str, tuple[str, str | None]] = {
    "kafka": ("kafka", None),
    "nats": ("nats", None),
    "pubsub": ("googlepubsub", None),
    "pulsar": ("pulsar", None),
    "rabbitmq": ("amqp", "0-9-1"),
    "servicebus": ("amqp", "1.0"),
    "redis": ("redis", None),
    "rediss": ("rediss", None),
    "inmem": ("inmem", None),
}

_AVRO = "application/vnd.apache.avro+json;version=1.9.0"
_PROTOBUF = "application/vnd.google.protobuf;version=3"
_JSON_SCHEMA = "application/schema+json;version=draft-07"
_REF = "#/components/schemas/{name}"
_KEY = re.compile(r"[^A-Za-z0-9_.\-]+")


def _key(text: str) -> str:
    """A component or operation key (AsyncAPI allows letters, digits, ``.``, ``-`` and ``_``)."""
    return _KEY.sub("_", text).strip("_") or "unnamed"


# -- servers ----------------------------------------------------------------------------------
def _server(spec: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """(scheme, the AsyncAPI server object) of a backend spec, with no credential in it."""
    if isinstance(spec, Mapping):
        scheme = str(spec.get("backend") or str(spec.get("url", "")).partition("://")[0] or "unknown")
        url = spec.get("url")
        if not isinstance(url, str):
            protocol, version = PROTOCOLS.get(scheme, (scheme, None))
            server: dict[str, Any] = {"host": "localhost", "protocol": protocol}
            server["description"] = "configured by a settings mapping (its host is not shown)"
            return scheme, _versioned(server, version)
        spec = url
    if looks_like_connection_string(spec):
        match = re.search(r"Endpoint=[a-z]+://([^/;]+)", spec, re.IGNORECASE)
        host = match.group(1) if match else "servicebus"
        return "servicebus", {"host": host, "protocol": "amqp", "protocolVersion": "1.0"}
    parsed = parse_url(spec)
    protocol, version = PROTOCOLS.get(parsed.scheme, (parsed.scheme, None))
    server = {"host": ",".join(parsed.hosts) or "localhost", "protocol": protocol}
    if parsed.path and parsed.path != "/":
        server["pathname"] = parsed.path
    return parsed.scheme, _versioned(server, version)


def _versioned(server: dict[str, Any], version: str | None) -> dict[str, Any]:
    if version is not None:
        server["protocolVersion"] = version
    return server


# -- payloads ---------------------------------------------------------------------------------
class _Schemas:
    """The payload schemas of one document: ``components.schemas`` filled as payloads are added."""

    def __init__(self) -> None:
        self.components: dict[str, Any] = {}

    def hoist(self, schema: dict[str, Any], defs: Mapping[str, Any]) -> dict[str, Any]:
        for name, definition in defs.items():
            self.components.setdefault(_key(name), definition)
        return schema

    def of_type(self, target: Any, engine: str | None) -> dict[str, Any]:
        """The JSON Schema of a type form: pydantic for pydantic types, msgspec for the rest."""
        if engine == "pydantic":
            pydantic = importlib.import_module("pydantic")
            schema = pydantic.TypeAdapter(target).json_schema(ref_template=_REF.replace("{name}", "{model}"))
            defs = schema.pop("$defs", {})
            return self.hoist(schema, defs)
        try:
            msgspec = importlib.import_module("msgspec")
        except ImportError:
            return {}  # no library to describe it with: any value
        (schema,), defs = msgspec.json.schema_components([target], ref_template=_REF)
        return self.hoist(dict(schema), defs)

    def message(self, binding: Binding[Any] | None, form: str, name: str) -> dict[str, Any]:
        """The AsyncAPI message (``name``, ``contentType``, ``payload``) of a payload."""
        if form == "bytes" or (binding is None and form != "str"):
            return {"name": name, "contentType": "application/octet-stream", "payload": {"type": "string"}}
        if form == "str":
            return {"name": name, "contentType": "text/plain", "payload": {"type": "string"}}
        assert binding is not None
        message: dict[str, Any] = {"name": name, "contentType": binding.content_type}
        schema_format = getattr(binding, "schema", None)
        fmt = binding.format
        if schema_format is not None and fmt in ("avro", "protobuf", "json") and binding.target is None:
            message["payload"] = _registry_payload(fmt, binding.schema)  # type: ignore[attr-defined]
        elif binding.codec is not None:
            message["payload"] = {"type": "string"} if binding.content_type.startswith("text/") else {}
        else:
            message["payload"] = self.of_type(binding.target, binding.engine)
        return message


def _registry_payload(fmt: str, schema: Any) -> dict[str, Any]:
    """A multi-format schema for a :mod:`broker.schemas` binding (Avro, Protobuf, JSON Schema)."""
    if fmt == "avro":
        return {"schemaFormat": _AVRO, "schema": json.loads(schema)}
    if fmt == "json":
        return {"schemaFormat": _JSON_SCHEMA, "schema": json.loads(schema)}
    return {"schemaFormat": _PROTOBUF, "schema": proto_text(schema)}


_PROTO_SCALARS = {
    1: "double", 2: "float", 3: "int64", 4: "uint64", 5: "int32", 6: "fixed64", 7: "fixed32",
    8: "bool", 9: "string", 12: "bytes", 13: "uint32", 15: "sfixed32", 16: "sfixed64",
    17: "sint32", 18: "sint64",
}  # fmt: skip


def proto_text(message_class: Any) -> str:
    """The ``.proto`` (proto3) text of a Protobuf message class and the messages and enums it uses."""
    root = message_class.DESCRIPTOR
    seen: dict[str, str] = {}

    def emit(descriptor: Any) -> None:
        if descriptor.full_name in seen:
            return
        seen[descriptor.full_name] = ""
        lines = [f"message {descriptor.name} {{"]
        for item in descriptor.fields:
            label = "repeated " if _repeated(item) else ""
            if item.message_type is not None:
                kind = item.message_type.name
                emit(item.message_type)
            elif item.enum_type is not None:
                kind = item.enum_type.name
                values = " ".join(f"{v.name} = {v.number};" for v in item.enum_type.values)
                seen.setdefault(item.enum_type.full_name, f"enum {kind} {{ {values} }}")
            else:
                kind = _PROTO_SCALARS.get(item.type, "bytes")
            lines.append(f"  {label}{kind} {item.name} = {item.number};")
        lines.append("}")
        seen[descriptor.full_name] = "\n".join(lines)

    emit(root)
    package = root.file.package
    head = ['syntax = "proto3";'] + ([f"package {package};"] if package else [])
    return "\n".join([*head, *seen.values()]) + "\n"


def _repeated(field: Any) -> bool:
    repeated = getattr(field, "is_repeated", None)
    if isinstance(repeated, bool):
        return repeated
    return bool(field.label == 3)


# -- bindings ---------------------------------------------------------------------------------
def _channel_bindings(scheme: str, topic: str) -> dict[str, Any] | None:
    if scheme == "kafka":
        return {"kafka": {"topic": topic, "bindingVersion": "0.5.0"}}
    if scheme == "pulsar":
        namespace = "default"
        if "://" in topic:
            namespace = topic.split("://", 1)[1].split("/")[1] if topic.count("/") >= 4 else namespace
        persistence = "non-persistent" if topic.startswith("non-persistent://") else "persistent"
        return {"pulsar": {"namespace": namespace, "persistence": persistence, "bindingVersion": "0.1.0"}}
    if scheme == "rabbitmq":
        exchange = {"name": topic, "type": "fanout", "durable": True, "autoDelete": False, "vhost": "/"}
        return {"amqp": {"is": "routingKey", "exchange": exchange, "bindingVersion": "0.3.0"}}
    return None


def _receive_bindings(scheme: str, subscription: str) -> dict[str, Any] | None:
    if scheme == "kafka":
        group = {"type": "string", "enum": [subscription]}
        return {"kafka": {"groupId": group, "bindingVersion": "0.5.0"}}
    if scheme == "nats":
        return {"nats": {"queue": subscription, "bindingVersion": "0.1.0"}}
    if scheme == "rabbitmq":
        return {"amqp": {"ack": True, "bindingVersion": "0.3.0"}}
    return None


def _message_bindings(scheme: str) -> dict[str, Any] | None:
    attributes = {"type": "object", "additionalProperties": {"type": "string"}}
    if scheme == "kafka":
        return {"kafka": {"key": {"type": "string"}, "bindingVersion": "0.5.0"}}
    if scheme == "pubsub":
        return {"googlepubsub": {"attributes": attributes, "bindingVersion": "0.2.0"}}
    return None


def _server_bindings(scheme: str) -> dict[str, Any] | None:
    if scheme == "pulsar":
        return {"pulsar": {"tenant": "public", "bindingVersion": "0.1.0"}}
    return None


# -- the document -----------------------------------------------------------------------------
class _Builder:
    def __init__(self, app: App) -> None:
        self.app = app
        self.schemas = _Schemas()
        self.schemes: dict[str, str] = {}
        self.servers: dict[str, Any] = {}
        self.channels: dict[str, Any] = {}
        self.channel_ids: dict[tuple[str, str], str] = {}
        self.channel_schemes: dict[str, str] = {}
        self.messages: dict[str, Any] = {}
        self.operations: dict[str, Any] = {}

    def add_servers(self) -> None:
        for name, spec in self.app.backend_specs.items():
            scheme, server = _server(spec)
            bindings = _server_bindings(scheme)
            if bindings is not None:
                server["bindings"] = bindings
            self.schemes[name] = scheme
            self.servers[_key(name)] = server

    def channel(self, backend: str, topic: str) -> str:
        found = self.channel_ids.get((backend, topic))
        if found is not None:
            return found
        same_topic = sum(1 for (_, t) in self.channel_ids if t == topic)
        key = _key(topic if not same_topic else f"{backend}-{topic}")
        while key in self.channels:
            key = _key(f"{key}-{backend}")
        self.channel_ids[(backend, topic)] = key
        self.channel_schemes[key] = self.schemes.get(backend, "")
        channel: dict[str, Any] = {
            "address": topic,
            "servers": [{"$ref": f"#/servers/{_key(backend)}"}],
            "messages": {},
        }
        bindings = _channel_bindings(self.schemes.get(backend, ""), topic)
        if bindings is not None:
            channel["bindings"] = bindings
        self.channels[key] = channel
        return key

    def message_on(self, channel: str, message: dict[str, Any]) -> dict[str, str]:
        """Register ``message`` in components (a distinct name per distinct message) and on ``channel``;
        the operation's reference to it."""
        bindings = _message_bindings(self.channel_schemes[channel])
        if bindings is not None:
            message = {**message, "bindings": bindings}
        base = _key(message["name"])
        name = base
        number = 1
        while name in self.messages and self.messages[name] != {**message, "name": name}:
            number += 1
            name = f"{base}{number}"
        message = {**message, "name": name}
        self.messages[name] = message
        self.channels[channel]["messages"][name] = {"$ref": f"#/components/messages/{name}"}
        return {"$ref": f"#/channels/{channel}/messages/{name}"}

    def operation(self, key: str, body: dict[str, Any]) -> None:
        key = _key(key)
        unique = key
        number = 1
        while unique in self.operations:
            number += 1
            unique = f"{key}_{number}"
        self.operations[unique] = body

    def add_subscriber(self, subscriber: Subscriber) -> None:
        payload = subscriber.signature.payload
        handler = subscriber.name.rsplit(".", 1)[-1]
        form = payload.form if payload is not None else "bytes"
        binding = payload.binding if payload is not None else None
        if payload is not None and payload.form == "cloudevent":
            binding, form = payload.event_data, "binding"
        received = self.schemas.message(binding, form, _message_name(binding, handler))
        channel = self.channel(subscriber.backend, subscriber.topic)
        reference = self.message_on(channel, received)
        operation: dict[str, Any] = {
            "action": "receive",
            "channel": {"$ref": f"#/channels/{channel}"},
            "summary": f"{subscriber.name} handles {subscriber.topic!r} through {subscriber.subscription!r}",
            "messages": [reference],
        }
        if subscriber.signature.batch:
            operation["description"] = (
                f"In batches of up to {subscriber.batch_size or 'the default'} messages."
            )
        bindings = _receive_bindings(self.schemes.get(subscriber.backend, ""), subscriber.subscription)
        if bindings is not None:
            operation["bindings"] = bindings
        self.operation(handler, operation)
        if subscriber.publish_to is not None:
            backend = subscriber.publish_backend or subscriber.backend
            returns = subscriber.signature.returns
            sent = self.schemas.message(
                returns,
                "binding" if returns is not None else "bytes",
                _message_name(returns, f"{handler}Output"),
            )
            out = self.channel(backend, subscriber.publish_to)
            self.operation(
                f"{handler}.publish",
                {
                    "action": "send",
                    "channel": {"$ref": f"#/channels/{out}"},
                    "summary": f"{subscriber.name}'s return value",
                    "messages": [self.message_on(out, sent)],
                },
            )
        retry = subscriber.retry
        if retry is not None and isinstance(retry.dead_letter, DeadLetterTopic):
            dead = self.channel(subscriber.backend, retry.dead_letter.name)
            self.operation(
                f"{handler}.dead_letter",
                {
                    "action": "send",
                    "channel": {"$ref": f"#/channels/{dead}"},
                    "summary": f"messages {subscriber.name} failed, with x-dead-letter-* attributes",
                    "messages": [self.message_on(dead, received)],
                },
            )

    def build(self, title: str, version: str, description: str | None) -> dict[str, Any]:
        info: dict[str, Any] = {"title": title, "version": version}
        if description:
            info["description"] = description
        components: dict[str, Any] = {}
        if self.messages:
            components["messages"] = self.messages
        if self.schemas.components:
            components["schemas"] = self.schemas.components
        document: dict[str, Any] = {
            "asyncapi": ASYNCAPI_VERSION,
            "info": info,
            "servers": self.servers,
            "channels": self.channels,
            "operations": self.operations,
        }
        if components:
            document["components"] = components
        return document


def _message_name(binding: Binding[Any] | None, fallback: str) -> str:
    target = getattr(binding, "target", None) if binding is not None else None
    name = getattr(target, "__name__", None)
    if isinstance(name, str) and name not in ("dict", "list", "Any", "object"):
        return name
    return fallback


def document(
    app: App, *, title: str = "broker app", version: str = "0.1.0", description: str | None = None
) -> dict[str, Any]:
    """The AsyncAPI 3.0 document of ``app`` as a dict (JSON-serialisable); see the module docstring.

    Raises :class:`~broker.errors.ConfigError` for a backend URL that is not one.
    """
    from broker.app.application import App

    if not isinstance(app, App):
        raise ConfigError(f"an AsyncAPI document describes a broker.App, got {type(app).__name__}")
    builder = _Builder(app)
    builder.add_servers()
    for subscriber in app.subscribers:
        builder.add_subscriber(subscriber)
    return builder.build(title, version, description)
