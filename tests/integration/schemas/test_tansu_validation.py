"""Broker-side validation: Tansu started with ``--schema-registry`` refuses records that break a schema.

Tansu validates produced records against ``<topic>.json`` (JSON Schema), ``<topic>.avsc`` (Avro)
or ``<topic>.proto`` in its schema-registry directory: its own format, a schema with a ``key`` and
a ``value`` part, applied to plain payloads. What these tests show (Tansu 0.6):

- a JSON payload (and key) that matches is stored; one that breaks the schema is refused with
  ``INVALID_RECORD``, which the Kafka backend raises as :class:`~broker.errors.PublishError`;
  the records around it are stored and read back, nothing else lost;
- a Confluent-framed payload (the 5-byte header, then the JSON) is refused too: Tansu parses the
  whole payload as the document and knows nothing of registry framing;
- for Avro, Tansu expects each key and value as an Avro object container file (``Obj\\x01``, with
  the writer schema inside): a bare Avro datum and a Confluent-framed one are both refused;
- a topic with no schema file takes anything, framed payloads included;
- a Tansu gap: after refusing a record from an idempotent producer (librdkafka's and so the
  Kafka backend's default), Tansu answers every later record of that producer with
  ``PRODUCER_FENCED`` (librdkafka bumps the producer epoch after a refused record; Tansu fences
  it). Producers that meet broker-side validation on Tansu set ``enable.idempotence`` off, as the
  main test does; the second test pins the gap.
"""

from __future__ import annotations

import asyncio
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

import broker
from broker import OutboundMessage, schemas
from broker.backends.kafka.devserver import HOST, tansu_binary
from broker.driver.devserver import ProcessServer, free_port
from broker.errors import PublishError
from tests.integration.kafka.support import TEST_QUERY
from tests.unit.schemas.support import ORDER_JSON, mock_registry

fastavro = pytest.importorskip("fastavro")

PEOPLE = {
    "title": "Person",
    "type": "object",
    "properties": {
        "key": {"type": "string"},
        "value": {
            "type": "object",
            "properties": {"name": {"type": "string"}, "age": {"type": "integer", "minimum": 0}},
            "required": ["name", "age"],
        },
    },
}
READING = {"type": "record", "name": "reading", "fields": [{"name": "amount", "type": "double"}]}
OBSERVATIONS = {
    "type": "record",
    "name": "observation",
    "fields": [{"name": "key", "type": "string"}, {"name": "value", "type": READING}],
}


@pytest.fixture(scope="module")
def validating_tansu(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    """A Tansu of its own, validating topics ``people``, ``people-fenced`` (JSON Schema) and
    ``observations`` (Avro)."""
    workdir = tmp_path_factory.mktemp("tansu-schemas")
    (workdir / "schema").mkdir()
    for topic in ("people", "people-fenced"):
        (workdir / "schema" / f"{topic}.json").write_text(json.dumps(PEOPLE))
    (workdir / "schema" / "observations.avsc").write_text(json.dumps(OBSERVATIONS))
    port = free_port(HOST)
    listener = f"tcp://{HOST}:{port}"
    command = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        listener,
        "--advertised-listener-url",
        listener,
    ]
    command += ["--storage-engine", "memory://tansu/", "--schema-registry", "file://./schema"]
    with ProcessServer(
        command, url=f"kafka://{HOST}:{port}", host=HOST, port=port, workdir=str(workdir)
    ) as server:
        yield server


def _container(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.writer(out, fastavro.parse_schema(schema), [value])
    return out.getvalue()


def _datum(schema: Any, value: Any) -> bytes:
    out = io.BytesIO()
    fastavro.schemaless_writer(out, fastavro.parse_schema(schema), value)
    return out.getvalue()


async def test_a_record_breaking_the_topic_schema_is_refused_and_nothing_else_lost(
    validating_tansu: ProcessServer, tmp_path: Path
) -> None:
    _, registry = mock_registry()
    framed = schemas.json_schema(registry, ORDER_JSON, topic="people").encode({"id": 1, "item": "x"})
    url = f"{validating_tansu.url}?{TEST_QUERY}"
    async with broker.connect({"url": url, "producer_config": {"enable.idempotence": False}}) as backend:
        await backend.admin.create_topic("people", 1)  # one partition: read back in publish order
        people = backend.publisher().topic("people")
        good = [json.dumps({"name": n, "age": a}).encode() for n, a in (("ann", 31), ("bob", 42))]
        await people.publish(OutboundMessage(good[0], key='"p-1"'))
        with pytest.raises(PublishError) as broken:
            await people.publish(
                OutboundMessage(json.dumps({"name": "eve", "age": -1}).encode(), key='"p-2"')
            )
        assert "INVALID_RECORD" in str(broken.value) or "validate" in str(broken.value)
        with pytest.raises(PublishError):  # Confluent framing: not a JSON document to Tansu
            await people.publish(OutboundMessage(framed, key='"p-3"'))
        await people.publish(OutboundMessage(good[1], key='"p-4"'))

        observations = backend.publisher().topic("observations")
        key_text = _container({"type": "string"}, "sensor-1").decode("utf-8", "surrogateescape")  # binary key
        await observations.publish(OutboundMessage(_container(READING, {"amount": 1.5}), key=key_text))
        for refused in (
            _datum(READING, {"amount": 2.5}),
            b"\x00\x00\x00\x00\x01" + _datum(READING, {"amount": 2.5}),
        ):
            with pytest.raises(PublishError):
                await observations.publish(OutboundMessage(refused, key=key_text))

        free = f"free-{uuid.uuid4().hex[:6]}"  # no schema file: anything goes
        await backend.admin.create_topic(free, 1)
        await backend.publisher().topic(free).publish(OutboundMessage(framed))

        got: list[bytes] = []
        async with backend.records("people", "check") as records, asyncio.timeout(20):
            while len(got) < 2:
                got.append((await records.next_record()).value)
    assert got == good


async def test_tansu_fences_an_idempotent_producer_after_a_refused_record(
    validating_tansu: ProcessServer,
) -> None:
    async with broker.connect(f"{validating_tansu.url}?{TEST_QUERY}") as backend:
        people = backend.publisher().topic("people-fenced")
        await people.publish(OutboundMessage(json.dumps({"name": "ann", "age": 1}).encode(), key='"p-1"'))
        with pytest.raises(PublishError, match="INVALID_RECORD"):
            await people.publish(
                OutboundMessage(json.dumps({"name": "eve", "age": -1}).encode(), key='"p-2"')
            )
        with pytest.raises(PublishError, match="PRODUCER_FENCED"):
            await people.publish(OutboundMessage(json.dumps({"name": "bob", "age": 2}).encode(), key='"p-3"'))
