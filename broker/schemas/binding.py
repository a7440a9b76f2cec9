"""Registry-framed type bindings: a :class:`~broker.typed.Binding` whose payloads carry a schema id.

A :class:`SchemaBinding` encodes with confluent-kafka's serializer of its format and decodes with
a reader built once per writer schema (see :mod:`broker.schemas.formats`). It is a
``typed.Binding``, so every typed consumer (``typed.messages``, ``typed.records``, the receivers)
takes it and ``message.decoded`` is the value; and it has ``encode(value)`` / ``decode(data)``, so
it is a :class:`~broker.codecs.Codec` too (the stream processor's serdes).

The event loop never waits on the registry when values go through :func:`broker.schemas.topic` and
the consumers of :mod:`broker.schemas`: the first value of each topic is encoded in a worker thread
(registering or looking up its schema; the id is then cached), and consumers resolve the schema
ids of what they fetched in a worker thread before handing it out, so ``decoded`` is pure CPU. Used
elsewhere (``typed.*`` consumers, the processor), a schema id seen for the first time is looked up
where the value is encoded or decoded: once per schema, but in that thread.
"""

from __future__ import annotations

import asyncio
import copy
import io
import json
import threading
import uuid
from collections.abc import Callable, Iterable
from typing import Any, Generic, Literal, TypeVar

from broker.errors import BrokerError, ConfigError, DecodeError, EncodeError
from broker.message import Record
from broker.schemas import formats
from broker.schemas.errors import translate
from broker.schemas.formats import SchemaFormat, Strategy
from broker.schemas.framing import (
    KEY_SCHEMA_ID,
    MAGIC_ID,
    VALUE_SCHEMA_ID,
    header_bytes,
    message_indexes,
)
from broker.schemas.registry import Registry, sdk
from broker.typed.binding import Binding
from broker.typed.formats import CONTENT_TYPE, media_type

__all__ = ["Field", "IdPlacement", "SchemaBinding"]

T = TypeVar("T")

#: Which part of a record a binding encodes: the value or (Kafka only) the key.
Field = Literal["value", "key"]
#: Where the schema id travels: the 5-byte ``payload`` prefix, or a ``header`` holding the GUID.
IdPlacement = Literal["payload", "header"]


def _on_event_loop() -> bool:
    """Whether the calling thread is running an event loop (which must not wait on a registry)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return False
    return True


def _fresh(error: BrokerError) -> BrokerError:
    """A new error of ``error``'s class, message and attributes (raising the remembered instance
    again would overwrite its ``__context__`` and traceback at each raise)."""
    try:
        fresh: BrokerError = copy.copy(error)
    except Exception:
        fresh = BrokerError(*error.args)
        fresh.retryable = error.retryable
    return fresh


class SchemaBinding(Binding[T], Generic[T]):
    """Values of ``T`` framed for a Confluent Schema Registry (Avro, Protobuf or JSON Schema).

    Made by :func:`broker.schemas.avro`, :func:`~broker.schemas.protobuf` and
    :func:`~broker.schemas.json_schema`; see there for the settings.
    """

    __slots__ = (
        "_ctx",
        "_failed",
        "_fast",
        "_fast_ok",
        "_field_name",
        "_header",
        "_lock",
        "_prefixed",
        "_readers",
        "_serialization",
        "_serializer",
        "_to_dict",
        "_unreachable",
        "_warm",
        "auto_register",
        "field",
        "from_dict",
        "id_in",
        "parsed_reader",
        "registry",
        "schema",
        "strategy",
        "topic",
        "use_latest",
    )

    def __init__(
        self,
        registry: Registry,
        fmt: SchemaFormat,
        schema: Any,
        *,
        subject_strategy: Strategy = "topic",
        auto_register: bool = True,
        use_latest: bool = False,
        normalize: bool = False,
        id_in: IdPlacement = "payload",
        field: Field = "value",
        topic: str | None = None,
        to_dict: Callable[[T], Any] | None = None,
        from_dict: Callable[[Any], T] | None = None,
        content_type: str | None = None,
    ) -> None:
        if not isinstance(registry, Registry):
            raise ConfigError(
                f"a schema binding needs a broker.schemas.Registry, got {type(registry).__name__}"
            )
        if fmt not in formats.CONTENT_TYPES:
            raise ConfigError(f"format must be 'avro', 'protobuf' or 'json', got {fmt!r}")
        if id_in not in ("payload", "header"):
            raise ConfigError(f"id_in must be 'payload' or 'header', got {id_in!r}")
        if field not in ("value", "key"):
            raise ConfigError(f"field must be 'value' or 'key', got {field!r}")
        if use_latest and auto_register:
            raise ConfigError(
                "use_latest=True needs auto_register=False (the registry's latest version is used)"
            )
        self._decoders: dict[str, Callable[[bytes], T]] = {}
        #: The registry schemas are registered in and read from.
        self.registry = registry
        #: ``"avro"``, ``"protobuf"`` or ``"json"``.
        self.format = fmt
        #: The schema: Avro or JSON Schema text, or the Protobuf message class.
        self.schema = schema
        #: None: the binding's values are the format's own (dicts; messages of the class).
        self.target = None
        self.codec = None
        self.engine = None
        #: The subject name strategy.
        self.strategy = subject_strategy
        #: Whether the schema is registered when its subject does not have it.
        self.auto_register = auto_register
        #: Whether values are written with the subject's latest registered schema.
        self.use_latest = use_latest
        #: Where the schema id travels: ``"payload"`` (5-byte prefix) or ``"header"`` (GUID).
        self.id_in = id_in
        #: ``"value"`` or ``"key"``.
        self.field = field
        #: The topic :meth:`encode` names to the subject strategy (None: give one to :meth:`encode_for`).
        self.topic = topic
        #: Converts a decoded value (dict for Avro and JSON) to ``T`` (None: as decoded).
        self.from_dict = from_dict
        #: The content type published in the ``content-type`` attribute.
        self.content_type = content_type or formats.CONTENT_TYPES[fmt]
        self._serializer = formats.serializer(
            registry,
            fmt,
            schema,
            strategy=subject_strategy,
            auto_register=auto_register,
            use_latest=use_latest,
            normalize=normalize,
            header_id=id_in == "header",
            to_dict=to_dict,
        )
        self._serialization = sdk("confluent_kafka.serialization")
        message_field = self._serialization.MessageField
        self._ctx: dict[str, Any] = {}
        self._field_name = message_field.KEY if field == "key" else message_field.VALUE
        #: The Avro schema values are read into (parsed; writer schemas resolve to it).
        self.parsed_reader: Any = None
        if fmt == "avro":
            try:
                self.parsed_reader = sdk("fastavro").parse_schema(json.loads(schema))
            except Exception as exc:
                raise translate(exc, "parsing the Avro schema") from exc
        self._readers: dict[int | str, formats.Reader] = {}
        #: 5-byte header (magic byte, schema id) -> reader of payloads framed with it.
        self._prefixed: dict[bytes, formats.PrefixedReader] = {}
        self._header = KEY_SCHEMA_ID if field == "key" else VALUE_SCHEMA_ID
        self._failed: dict[int | str, BrokerError] = {}
        #: schema id or GUID -> the retryable error of its last lookup in a worker thread (resolve).
        self._unreachable: dict[int | str, BrokerError] = {}
        self._warm: set[str] = set()
        #: topic -> value -> payload, once confluent-kafka's serializer resolved the topic's schema id.
        self._fast: dict[str, Callable[[Any], bytes]] = {}
        self._fast_ok = id_in == "payload" and not use_latest and fmt in ("avro", "protobuf")
        if fmt == "avro" and self._fast_ok:
            self._fast_ok = isinstance(self.parsed_reader, dict) and self.parsed_reader.get("type") != "bytes"
        self._to_dict = to_dict
        self._lock = threading.Lock()
        self.encoder = self.encode
        self.decoder = self._decode_plain

    def __repr__(self) -> str:
        return f"<SchemaBinding {self.format} {self.field} in {self.registry!r}>"

    # -- encoding ------------------------------------------------------------------------------
    def context(self, topic: str, headers: Any = None) -> Any:
        """confluent-kafka's ``SerializationContext`` for ``topic`` (cached when no headers)."""
        if headers is not None:
            return self._serialization.SerializationContext(topic, self._field_name, headers)
        ctx = self._ctx.get(topic)
        if ctx is None:
            ctx = self._ctx[topic] = self._serialization.SerializationContext(topic, self._field_name)
        return ctx

    def encode_for(self, value: T, topic: str, headers: dict[str, bytes] | None = None) -> bytes:
        """The framed payload of ``value`` for ``topic``; with ``id_in="header"`` the schema-id header
        is added to ``headers`` (a dict of bytes). Raises :class:`~broker.errors.EncodeError`, or the
        registry's error (:mod:`broker.schemas.errors`)."""
        fast = self._fast.get(topic)
        if fast is not None:
            try:
                return fast(value)
            except Exception as exc:
                raise self._encode_failure(exc, value) from exc
        if self.id_in == "header":
            if headers is None:
                headers = {}
            ctx = self.context(topic, headers)
        else:
            ctx = self.context(topic)
        try:
            data = self._serializer(value, ctx)
        except Exception as exc:
            raise self._encode_failure(exc, value) from exc
        if data is None:
            raise EncodeError(f"{self!r} cannot encode None")
        data = bytes(data)
        if self._fast_ok:
            self._fast[topic] = self._fast_encoder(data)
        self._warm.add(topic)
        return data

    def _fast_encoder(self, first: bytes) -> Callable[[Any], bytes]:
        """value -> payload for a topic whose first payload confluent-kafka's serializer wrote as
        ``first``: the same header (magic byte, schema id, Protobuf message indexes) and the same
        encoder (fastavro's ``schemaless_writer`` with the same schema; ``SerializeToString``), so
        the bytes are those it writes, without its per-call subject and rule bookkeeping."""
        if self.format == "protobuf":
            header = first[: message_indexes(first, 5)[1]]
            cls = self.schema

            def encode_protobuf(value: Any) -> bytes:
                if not isinstance(value, cls):
                    raise EncodeError(f"{self!r} encodes {cls.__name__} messages, got {type(value).__name__}")
                serialized: bytes = value.SerializeToString()
                return header + serialized

            return encode_protobuf
        writer = sdk("fastavro").schemaless_writer
        parsed, prefix, to_dict, bytes_io = self.parsed_reader, first[:5], self._to_dict, io.BytesIO

        def encode_avro(value: Any) -> bytes:
            buffer = bytes_io()
            buffer.write(prefix)
            writer(buffer, parsed, to_dict(value) if to_dict is not None else value)
            return buffer.getvalue()

        return encode_avro

    def _encode_failure(self, exc: Exception, value: Any) -> BrokerError:
        name = type(exc).__name__
        if name == "SchemaRegistryError" or type(exc).__module__.startswith(("httpx", "httpcore")):
            return translate(exc, f"encoding a {self.format} {self.field}")
        cause = exc.__cause__ or exc.__context__
        if (
            name == "SerializationError"
            and cause is not None
            and type(cause).__name__ == "SchemaRegistryError"
        ):
            return translate(cause, f"encoding a {self.format} {self.field}")
        if isinstance(exc, BrokerError):
            return exc
        text = str(exc).strip().replace("\n", "; ")
        return EncodeError(f"cannot encode {type(value).__name__} with {self!r}: {text}")

    def encode(self, value: T) -> bytes:
        """The framed payload of ``value`` for the binding's ``topic`` (``id_in="payload"`` only)."""
        if self.topic is None and self.strategy != "record":
            raise EncodeError(
                f"{self!r} has no topic= for its {self.strategy!r} subject strategy: use encode_for()"
            )
        if self.id_in == "header":
            raise EncodeError(
                f"{self!r} writes its schema id in a header: use encode_for() or schemas.topic()"
            )
        return self.encode_for(value, self.topic or "")

    def is_warm(self, topic: str) -> bool:
        """Whether a value was encoded for ``topic`` (its schema id is cached: no registry call)."""
        return topic in self._warm

    # -- decoding ------------------------------------------------------------------------------
    def schema_key(self, data: bytes, attributes: Any = None) -> tuple[int | str, int, bytes | None]:
        """(schema id or GUID, where the encoded data starts, the header's bytes) of a payload."""
        if attributes:
            header = attributes.get(self._header)
            if header is not None:
                raw = header_bytes(header)
                if raw is None:
                    raise DecodeError(f"the schema-id header {header!r} holds no schema GUID")
                return str(uuid.UUID(bytes=raw[1:17])), 0, raw
        if len(data) < 5 or data[0] != MAGIC_ID:
            raise DecodeError(
                f"the payload is not registry-framed (no magic byte 0 and schema id, no schema-id header): "
                f"{bytes(data[:8])!r}..."
            )
        return int.from_bytes(data[1:5], "big"), 5, None

    def _build_reader(self, key: int | str) -> formats.Reader:
        """The reader of schema ``key`` (looked up in the registry; blocking)."""
        if isinstance(key, int):
            writer = self.registry.schema(key)
        else:
            writer = self.registry.schema_by_guid(key)
        built = formats.reader(
            self.registry,
            self.format,  # type: ignore[arg-type]
            self.schema,
            writer,
            parsed_reader=self.parsed_reader,
            from_dict=self.from_dict,
            field=self.field,
            strategy=self.strategy,
        )
        with self._lock:
            self._readers[key] = built
            self._unreachable.pop(key, None)
            if isinstance(key, int):
                self._prefixed[bytes([MAGIC_ID]) + key.to_bytes(4, "big")] = formats.prefixed_reader(built)
        return built

    def reader_for(self, key: int | str) -> formats.Reader:
        """The reader of schema ``key``: cached, else looked up now (blocking the calling thread).

        Called on a running event loop, a schema whose last lookup in a worker thread
        (:meth:`resolve`) failed with a retryable error raises a new error of that class, chained
        from it, without asking the registry again: the consumers of :mod:`broker.schemas` decode
        on the event loop, which must not wait on a registry just found unreachable (the next
        :meth:`resolve` of that schema tries again, off the loop). Called off the loop (a worker
        thread, blocking code), it looks the schema up again, so such callers recover as soon as
        the registry does."""
        found = self._readers.get(key)
        if found is not None:
            return found
        failed = self._failed.get(key)
        if failed is not None:
            raise failed
        unreachable = self._unreachable.get(key)
        if unreachable is not None and _on_event_loop():
            raise _fresh(unreachable) from unreachable
        try:
            return self._build_reader(key)
        except BrokerError as exc:
            if not exc.retryable:
                self._failed[key] = exc
                self._unreachable.pop(key, None)
            elif unreachable is not None:
                self._unreachable[key] = exc
            raise

    def decode_payload(self, data: bytes, attributes: Any = None) -> T:
        """The value of a framed payload (``attributes``: where a schema-id header may be)."""
        key, start, header = self.schema_key(data, attributes)
        value: T = self.reader_for(key)(data, start, header)
        return value

    def _decode_plain(self, data: bytes) -> T:
        return self.decode_payload(data)

    def decode(self, data: bytes, content_type: str | None = None) -> T:
        """The value carried by a framed ``data``: :class:`~broker.errors.DecodeError` when it does
        not decode; a registry that cannot be reached raises its retryable error."""
        return self._decode_failing(data, None, None, content_type)

    def _decode_failing(self, data: bytes, attributes: Any, received: Any, content_type: str | None) -> T:
        """:meth:`decode_payload`, a failure raised as the :meth:`failure` of ``received`` (a
        retryable registry error as it is)."""
        try:
            return self.decode_payload(data, attributes)
        except BrokerError as exc:
            if exc.retryable:
                raise
            raise self.failure(exc, received, content_type) from exc
        except Exception as exc:
            raise self.failure(exc, received, content_type) from exc

    def decode_received(self, received: Any, data: bytes | None) -> T | None:
        """``received``'s payload as ``T`` (None for a tombstone); the schema id from the payload or
        its schema-id header. Raises :class:`~broker.errors.DecodeError` carrying ``received`` (a
        retryable registry error as it is)."""
        if data is None:
            return None
        attributes = received.attributes
        if attributes:
            content_type = attributes.get(CONTENT_TYPE)
            framed = self._header not in attributes
        else:
            content_type, framed = None, True
        if framed and (content_type is None or content_type == self.content_type):
            read = self._prefixed.get(data[:5])
            if read is not None:
                try:
                    value: T = read(data)
                    return value
                except Exception as exc:
                    raise self.failure(exc, received, content_type) from exc
        if content_type is not None and content_type != self.content_type:
            if media_type(content_type) != media_type(self.content_type):
                error = DecodeError(f"content type {content_type!r} is not {self.content_type!r}")
                raise self.failure(error, received, content_type) from error
        return self._decode_failing(data, attributes, received, content_type)

    def decode_key(self, received: Any) -> T | None:
        """The key of ``received`` (a Kafka record or message) decoded with this key binding."""
        key = received.key
        if key is None:
            return None
        data = key.encode("utf-8", "surrogateescape") if isinstance(key, str) else bytes(key)
        return self._decode_failing(data, received.attributes, received, None)

    async def resolve(self, items: Iterable[Any], *, keys: bool = False) -> None:
        """Look up, in a worker thread, the writer schemas of ``items`` (received messages or records)
        not seen before, so decoding them is pure CPU. Never raises: a schema that cannot be had
        fails the decoding of its items only (``DecodeError``, or the registry's retryable error).
        A retryable failure is kept until the schema's next successful lookup, so decoding on the
        event loop raises it without a second, blocking attempt there (decoding off the loop
        looks the schema up again)."""
        wanted: set[int | str] = set()
        readers, failed, prefixed = self._readers, self._failed, self._prefixed
        for item in items:
            if keys:
                data = item.key
                if isinstance(data, str):
                    data = data.encode("utf-8", "surrogateescape")
            else:
                data = item.value if isinstance(item, Record) else item.data
            # A known 5-byte header is the common case: nothing to look up, no attributes read (a
            # GUID header on such a payload, were there one, is looked up when it is decoded).
            if data is None or data[:5] in prefixed:
                continue
            try:
                key = self.schema_key(data, item.attributes)[0]
            except DecodeError:
                continue
            if key not in readers and key not in failed:
                wanted.add(key)
        for key in wanted:
            try:
                await asyncio.to_thread(self._build_reader, key)
            except BrokerError as exc:
                if exc.retryable:
                    self._unreachable[key] = exc
                else:
                    self._unreachable.pop(key, None)
                    failed[key] = exc
            except Exception:
                continue

    async def prepare(self, value: T, topic: str | None = None) -> bytes:
        """Encode ``value`` for ``topic`` (default: the binding's) in a worker thread: registers or
        looks up the subject's schema so later encodes for that topic make no registry call."""
        name = topic if topic is not None else (self.topic or "")
        headers: dict[str, bytes] | None = {} if self.id_in == "header" else None
        return await asyncio.to_thread(self.encode_for, value, name, headers)
