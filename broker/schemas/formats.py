"""The three registry formats: confluent-kafka's serializers, and readers built once per schema id.

Encoding is confluent-kafka's own serializer (``AvroSerializer``, ``ProtobufSerializer``,
``JSONSerializer`` of ``confluent_kafka.schema_registry``): subject name strategy,
auto-registration or lookup, "use latest version", schema-id caching and the framing are its own,
so the bytes are the ones it writes. Decoding resolves the writer schema by id or GUID through the
registry client once, then reads every payload of that schema directly: Avro with fastavro's
``schemaless_reader`` (writer schema resolved to the binding's schema: Avro's evolution rules),
Protobuf by skipping the message indexes and parsing the binding's message class (Protobuf's rules:
unknown fields kept, missing ones default), JSON Schema with confluent-kafka's ``JSONDeserializer``.
A writer schema with references or a rule set (CEL, encryption) is read by confluent-kafka's
deserializer, which runs them.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable
from typing import Any, Final, Literal

from broker.errors import ConfigError, DecodeError
from broker.schemas.framing import message_indexes
from broker.schemas.registry import Registry, sdk

__all__ = [
    "CONTENT_TYPES",
    "PrefixedReader",
    "Reader",
    "SchemaFormat",
    "Strategy",
    "prefixed_reader",
    "reader",
    "serializer",
    "subject_strategy",
]

#: A registry format.
SchemaFormat = Literal["avro", "protobuf", "json"]

#: A subject name strategy: ``{topic}-value`` / ``{topic}-key``; ``{record name}``; ``{topic}-{record name}``.
Strategy = Literal["topic", "record", "topic_record"]

#: The content type each format's messages carry (the ``content-type`` attribute).
CONTENT_TYPES: Final[dict[str, str]] = {
    "avro": "application/vnd.confluent.avro",
    "protobuf": "application/vnd.confluent.protobuf",
    "json": "application/vnd.confluent.jsonschema+json",
}

#: (data, start, guid header) -> value: reads a payload whose encoded data begins at ``start``
#: (the schema-id header's bytes given when the id travelled in a header).
Reader = Callable[[bytes, int, "bytes | None"], Any]
#: data -> value: reads a payload framed with the 5-byte header of one schema id.
PrefixedReader = Callable[[bytes], Any]


def subject_strategy(strategy: Strategy) -> Any:
    """confluent-kafka's function for ``strategy``."""
    module = sdk()
    functions = {
        "topic": module.topic_subject_name_strategy,
        "record": module.record_subject_name_strategy,
        "topic_record": module.topic_record_subject_name_strategy,
    }
    try:
        return functions[strategy]
    except KeyError:
        raise ConfigError(
            f"subject_strategy must be 'topic', 'record' or 'topic_record', got {strategy!r}"
        ) from None


def _plain(convert: Callable[[Any], Any] | None) -> Callable[[Any, Any], Any] | None:
    """A one-argument conversion as confluent-kafka's (value, ctx) callable."""
    if convert is None:
        return None
    return lambda value, ctx: convert(value)


def serializer(
    registry: Registry,
    fmt: SchemaFormat,
    schema: Any,
    *,
    strategy: Strategy,
    auto_register: bool,
    use_latest: bool,
    normalize: bool,
    header_id: bool,
    to_dict: Callable[[Any], Any] | None,
) -> Any:
    """confluent-kafka's serializer of ``fmt`` for ``schema`` (Avro or JSON Schema text, or a
    Protobuf message class), configured as the binding asks."""
    module = sdk()
    conf: dict[str, Any] = {
        "auto.register.schemas": auto_register,
        "use.latest.version": use_latest,
        "normalize.schemas": normalize,
        "subject.name.strategy": subject_strategy(strategy),
        "schema.id.serializer": (
            module.header_schema_id_serializer if header_id else module.prefix_schema_id_serializer
        ),
    }
    client = registry.client
    try:
        if fmt == "avro":
            avro = sdk("confluent_kafka.schema_registry.avro")
            return avro.AvroSerializer(client, schema, to_dict=_plain(to_dict), conf=conf)
        if fmt == "protobuf":
            protobuf = sdk("confluent_kafka.schema_registry.protobuf")
            return protobuf.ProtobufSerializer(schema, client, conf=conf)
        if fmt == "json":
            json_schema = sdk("confluent_kafka.schema_registry.json_schema")
            return json_schema.JSONSerializer(schema, client, to_dict=_plain(to_dict), conf=conf)
    except (ValueError, TypeError) as exc:
        raise ConfigError(f"invalid {fmt} binding settings: {exc}") from exc
    raise ConfigError(f"format must be 'avro', 'protobuf' or 'json', got {fmt!r}")


def _confluent_reader(
    registry: Registry,
    fmt: SchemaFormat,
    schema: Any,
    from_dict: Callable[[Any], Any] | None,
    field: str,
    strategy: Strategy,
) -> Reader:
    """A reader through confluent-kafka's deserializer (references, rule sets, JSON Schema)."""
    module = sdk()
    serialization = sdk("confluent_kafka.serialization")
    client = registry.client
    conf = {"subject.name.strategy": subject_strategy(strategy)}
    if fmt == "avro":
        avro = sdk("confluent_kafka.schema_registry.avro")
        deserialize = avro.AvroDeserializer(client, schema, from_dict=_plain(from_dict), conf=conf)
    elif fmt == "json":
        json_schema = sdk("confluent_kafka.schema_registry.json_schema")
        deserialize = json_schema.JSONDeserializer(
            schema, from_dict=_plain(from_dict), schema_registry_client=client, conf=conf
        )
    else:
        protobuf = sdk("confluent_kafka.schema_registry.protobuf")
        deserialize = protobuf.ProtobufDeserializer(schema, conf, schema_registry_client=client)
    message_field = serialization.MessageField.KEY if field == "key" else serialization.MessageField.VALUE
    header = module._KEY_SCHEMA_ID if field == "key" else module._VALUE_SCHEMA_ID
    prefixed_ctx = serialization.SerializationContext("", message_field)

    def read(data: bytes, start: int, guid_header: bytes | None = None) -> Any:
        if guid_header is None:
            return deserialize(data, prefixed_ctx)
        ctx = serialization.SerializationContext("", message_field, [(header, guid_header)])
        return deserialize(data, ctx)

    return read


def reader(
    registry: Registry,
    fmt: SchemaFormat,
    schema: Any,
    writer: Any,
    *,
    parsed_reader: Any,
    from_dict: Callable[[Any], Any] | None,
    field: str,
    strategy: Strategy = "topic",
) -> Reader:
    """The reader of payloads written with ``writer`` (the registered ``Schema``), decoding to the
    binding's ``schema``. Raises :class:`~broker.errors.DecodeError` when ``writer`` is of another
    format."""
    kind = (getattr(writer, "schema_type", None) or "AVRO").upper()
    expected = {"avro": "AVRO", "protobuf": "PROTOBUF", "json": "JSON"}[fmt]
    if kind != expected:
        raise DecodeError(f"the payload's writer schema is {kind}, this binding reads {expected}")
    if writer.references or writer.rule_set is not None or fmt == "json":
        return _confluent_reader(registry, fmt, schema, from_dict, field, strategy)
    if fmt == "protobuf":
        parse = schema.FromString

        def read_protobuf(data: bytes, start: int, header: bytes | None = None) -> Any:
            if header is not None:  # the message indexes travel in the schema-id header
                return parse(data[start:])
            _, at = message_indexes(data, start)
            return parse(data[at:])

        read_protobuf.parse = parse  # type: ignore[attr-defined]
        return read_protobuf
    fastavro = sdk("fastavro")
    parsed_writer = fastavro.parse_schema(json.loads(writer.schema_str))
    schemaless_reader = fastavro.schemaless_reader
    bytes_io = io.BytesIO

    if from_dict is None:

        def read_avro(data: bytes, start: int, header: bytes | None = None) -> Any:
            buffer = bytes_io(data)
            buffer.seek(start)
            return schemaless_reader(buffer, parsed_writer, parsed_reader)

        return read_avro

    def read_avro_converted(data: bytes, start: int, header: bytes | None = None) -> Any:
        buffer = bytes_io(data)
        buffer.seek(start)
        return from_dict(schemaless_reader(buffer, parsed_writer, parsed_reader))

    return read_avro_converted


def prefixed_reader(read: Reader) -> PrefixedReader:
    """``read`` for payloads framed with the 5-byte header (the common Protobuf ``[0]`` message
    index read in place)."""
    parse = getattr(read, "parse", None)
    if parse is not None:

        def read_first_message(data: bytes) -> Any:
            if data[5] == 0:  # message indexes [0]: the first message type of the file
                return parse(data[6:])
            return read(data, 5, None)

        return read_first_message
    return lambda data: read(data, 5, None)
