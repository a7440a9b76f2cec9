"""Registry-framed Avro values decoded into columns, with fastavro, inside the Python data source.

With ``valueFormat=avro`` the source decodes every record's value (Confluent framing: magic byte
0 and the schema id, or the schema GUID in a ``__value_schema_id`` header) and adds one column per
field of the reader schema ``avroSchema`` (an Avro record, JSON text) after the usual ones, named
``avroColumnPrefix`` + the field's name (a name the source uses already is refused); the raw
``value`` stays. Each executor looks a writer schema up once per id in the registry
``schemaRegistryUrl`` (``schemaRegistryAuthEnv`` names an environment variable holding
``user:secret`` for basic auth; credentials never go into options) and resolves it to the reader
schema: Avro's evolution rules, as in :mod:`broker.schemas`.

Field types: ``boolean``, ``int``, ``long``, ``float``, ``double``, ``string``, ``bytes``, ``enum``
(as string) and their nullable unions (``["null", T]``) map to the Spark type of the same name;
any other field (records, arrays, maps, other unions) becomes a JSON ``string`` column. A
tombstone gives nulls; a value that does not decode fails the task with a ``DecodeError``.
"""

from __future__ import annotations

import io
import json
import os
import threading
from collections.abc import Iterator
from typing import Any

from broker.contrib.spark.arrow import COLUMNS, pa
from broker.contrib.spark.options import Options
from broker.errors import ConfigError, DecodeError

__all__ = ["decoded_batches", "enabled", "extra_schema"]

_SIMPLE = {
    "boolean": ("boolean", "bool_"),
    "int": ("int", "int32"),
    "long": ("bigint", "int64"),
    "float": ("float", "float32"),
    "double": ("double", "float64"),
    "string": ("string", "string"),
    "bytes": ("binary", "binary"),
    "enum": ("string", "string"),
}

#: (registry url, schema id or GUID) -> parsed writer schema, per executor process.
_WRITERS: dict[tuple[str, int | str], Any] = {}
_REGISTRIES: dict[str, Any] = {}
_LOCK = threading.Lock()


def enabled(options: Options) -> bool:
    """Whether ``valueFormat`` asks for decoded columns (``avro``); ``ConfigError`` for other formats."""
    fmt = (options.get("valueFormat") or "").lower()
    if fmt in ("", "binary", "raw"):
        return False
    if fmt != "avro":
        raise ConfigError(f"option valueFormat is 'avro' (registry-framed) or unset, got {fmt!r}")
    return True


def _kind(field_type: Any) -> str:
    if isinstance(field_type, list):
        rest = [t for t in field_type if t != "null"]
        return _kind(rest[0]) if len(rest) == 1 else "json"
    if isinstance(field_type, dict):
        field_type = field_type.get("type")
        if field_type == "enum":
            return "enum"
        return field_type if field_type in _SIMPLE and field_type != "enum" else "json"
    return field_type if field_type in _SIMPLE else "json"


def _fields(options: Options) -> list[tuple[str, str]]:
    """(column, kind) per field of the reader schema."""
    text = options.require("avroSchema", "an Avro reader schema (JSON) for valueFormat=avro")
    try:
        schema = json.loads(text)
    except ValueError as exc:
        raise ConfigError(f"option avroSchema is not JSON: {exc}") from exc
    if not isinstance(schema, dict) or schema.get("type") != "record":
        raise ConfigError("option avroSchema must be an Avro record schema")
    prefix = options.get("avroColumnPrefix") or ""
    out = []
    for field in schema.get("fields", []):
        name = prefix + field["name"]
        if name in COLUMNS:
            raise ConfigError(
                f"Avro field {field['name']!r} clashes with the source's column {name!r}: "
                "set option avroColumnPrefix (for example 'v_')"
            )
        out.append((name, _kind(field["type"])))
    return out


def extra_schema(options: Options) -> str:
    """The decoded columns as Spark DDL (appended to the source's schema)."""
    columns = [(name, _SIMPLE[kind][0] if kind != "json" else "string") for name, kind in _fields(options)]
    return ", ".join(f"`{name}` {ddl}" for name, ddl in columns)


def _registry(options: Options) -> Any:
    url = options.require("schemaRegistryUrl", "the schema registry for valueFormat=avro")
    with _LOCK:
        found = _REGISTRIES.get(url)
        if found is None:
            from broker.schemas import Registry

            auth_env = options.get("schemaRegistryAuthEnv")
            auth = None
            if auth_env:
                user, _, secret = os.environ.get(auth_env, "").partition(":")
                auth = (user, secret)
            found = _REGISTRIES[url] = Registry(url, basic_auth=auth)
        return found


def _writer(options: Options, key: int | str) -> Any:
    url = options.require("schemaRegistryUrl", "the schema registry for valueFormat=avro")
    cached = _WRITERS.get((url, key))
    if cached is None:
        import fastavro

        registry = _registry(options)
        schema = registry.schema(key) if isinstance(key, int) else registry.schema_by_guid(key)
        cached = _WRITERS[(url, key)] = fastavro.parse_schema(json.loads(schema.schema_str))
    return cached


def _guid(attributes: Any) -> str | None:
    if not attributes:
        return None
    for name, value in attributes:
        if name == "__value_schema_id" and value is not None and len(value) == 17 and value[0] == 1:
            import uuid

            return str(uuid.UUID(bytes=bytes(value[1:])))
    return None


def decoded_batches(options: Options, batches: Iterator[Any]) -> Iterator[Any]:
    """``batches`` (Arrow record batches of the source's schema) with the decoded columns added."""
    import fastavro

    arrow = pa()
    fields = _fields(options)
    prefix = options.get("avroColumnPrefix") or ""
    reader = fastavro.parse_schema(json.loads(options.require("avroSchema", "an Avro reader schema")))
    read = fastavro.schemaless_reader
    types = [getattr(arrow, _SIMPLE[kind][1])() if kind != "json" else arrow.string() for _, kind in fields]
    for batch in batches:
        values = batch.column("value").to_pylist()
        attributes = batch.column("attributes").to_pylist()
        rows: list[dict[str, Any] | None] = []
        for value, attrs in zip(values, attributes, strict=True):
            if value is None:
                rows.append(None)
                continue
            guid = _guid(attrs)
            try:
                if guid is not None:
                    key: int | str = guid
                    start = 0
                elif len(value) >= 5 and value[0] == 0:
                    key, start = int.from_bytes(value[1:5], "big"), 5
                else:
                    raise DecodeError("the value is not registry-framed Avro")
                buffer = io.BytesIO(value)
                buffer.seek(start)
                decoded: Any = read(buffer, _writer(options, key), reader)
                rows.append(decoded)
            except DecodeError:
                raise
            except Exception as exc:
                raise DecodeError(f"cannot decode a registry-framed Avro value: {exc}") from exc
        columns = []
        for (name, kind), kind_type in zip(fields, types, strict=True):
            field_name = name[len(prefix) :]
            column = [None if row is None else row.get(field_name) for row in rows]
            if kind == "json":
                column = [None if v is None else json.dumps(v, default=str) for v in column]
            columns.append(arrow.array(column, type=kind_type))
        yield arrow.RecordBatch.from_arrays(
            list(batch.columns) + columns, names=list(batch.schema.names) + [n for n, _ in fields]
        )
