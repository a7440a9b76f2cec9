"""``broker asyncapi``: the AsyncAPI 3.0 documents pass the AsyncAPI Initiative's own parser.

The parser is ``@asyncapi/parser`` 3.6.x from npm, with its Avro and Protobuf schema parsers (so those
payloads are parsed too), pinned by ``tools/asyncapi/package-lock.json`` and
installed by ``make asyncapi`` (``make test`` depends on it). A document passes when the parser reports
no diagnostic of error severity. Two documents are checked in one parser run: the order service
example's (written by the ``broker asyncapi`` command) and one with every payload kind (pydantic with
nested models, dataclass, msgspec Struct, TypedDict, union, bytes, str, CloudEvent, batch, a codec,
Avro, Protobuf and JSON Schema bindings) on every backend (every protocol with bindings).
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Annotated, Any, TypedDict

import msgspec
import pydantic
import pytest

import broker
from broker import DeadLetterTopic, RetryPolicy, schemas
from broker.app.asyncapi import document
from broker.codecs import JsonCodec
from broker.typed import Binding, binding, union
from broker.typed.cloudevents import CloudEvent
from tests.unit.schemas.protos import V1

ROOT = Path(__file__).resolve().parents[2]
PARSER = ROOT / "tools" / "asyncapi"
SECRET = "s3cr3t-pw"
EXAMPLE = "examples/order_service.py"


class Address(pydantic.BaseModel):
    """A nested model: its schema is hoisted to components.schemas."""

    street: str
    city: str


class Customer(pydantic.BaseModel):
    """A pydantic model with a nested one and a list of them."""

    id: int
    address: Address
    previous: list[Address] = []


@dataclasses.dataclass
class Click:
    """A dataclass payload."""

    url: str
    at: float


class Tick(msgspec.Struct):
    """A msgspec Struct payload."""

    symbol: str
    price: float


class Note(TypedDict):
    """A TypedDict payload."""

    text: str


class Cat(pydantic.BaseModel):
    """One member of a union."""

    kind: str = "cat"
    lives: int = 9


class Dog(pydantic.BaseModel):
    """The other member."""

    kind: str = "dog"
    good: bool = True


AVRO = json.dumps(
    {
        "type": "record",
        "name": "Reading",
        "fields": [{"name": "sensor", "type": "string"}, {"name": "value", "type": "double"}],
    }
)
JSON_SCHEMA = json.dumps({"type": "object", "properties": {"sku": {"type": "string"}}, "required": ["sku"]})

#: The bindings the handlers name (module level: annotations are read from the module's names).
registry = schemas.Registry("http://127.0.0.1:1")  # never asked: the document needs no registry
readings = schemas.avro(registry, AVRO)
orders = schemas.protobuf(registry, V1["Order"])
skus = schemas.json_schema(registry, JSON_SCHEMA)
pets: Binding[Cat | Dog] = union(Cat, Dog)
blob_codec = binding(codec=JsonCodec())


def every_kind_app() -> broker.App:
    """An app on every backend, with a subscriber per payload kind."""
    app = broker.App(
        f"kafka://orders:{SECRET}@127.0.0.1:9092,127.0.0.1:9093?sasl_mechanism=PLAIN",
        nats=f"nats://bob:{SECRET}@127.0.0.1:4222",
        pubsub="pubsub://my-project",
        pulsar="pulsar://127.0.0.1:6650",
        rabbitmq=f"rabbitmq://guest:{SECRET}@127.0.0.1:5672/",
        servicebus=f"Endpoint=sb://shop.servicebus.windows.net/;SharedAccessKeyName=k;SharedAccessKey={SECRET}",
        redis=f"redis://:{SECRET}@127.0.0.1:6379/0",
        inmem="inmem://local",
    )

    @app.subscriber(
        "customers",
        "crm",
        publish_to="welcomes",
        retry=RetryPolicy(dead_letter=DeadLetterTopic("customers-dead")),
    )
    async def customers(customer: Customer) -> Click:
        return Click(url=f"/c/{customer.id}", at=0.0)

    @app.subscriber("clicks", "stats", backend="nats")
    async def clicks(click: Click) -> None: ...

    @app.subscriber("ticks", "prices", backend="pubsub")
    async def ticks(tick: Tick) -> None: ...

    @app.subscriber("persistent://public/orders/notes", "notes", backend="pulsar")
    async def notes(note: Note) -> None: ...

    @app.subscriber("pets", "vet", backend="rabbitmq", publish_to="pets-seen")
    async def pet(animal: Annotated[Cat | Dog, pets]) -> Annotated[Cat | Dog, pets]:
        return animal

    @app.subscriber("raw", "archive", backend="servicebus")
    async def raw(data: bytes) -> None: ...

    @app.subscriber("lines", "log", backend="redis")
    async def lines(text: str) -> None: ...

    @app.subscriber("events", "audit", backend="inmem")
    async def events(event: CloudEvent[Click]) -> None: ...

    @app.subscriber("clicks", "batches", backend="nats", batch_size=100)
    async def click_batches(batch: list[Click]) -> None: ...

    @app.subscriber("readings", "plots")
    async def readings_in(reading: Annotated[dict[str, Any], readings]) -> None: ...

    @app.subscriber("proto-orders", "ledger")
    async def ledger(order: Annotated[Any, orders]) -> None: ...

    @app.subscriber("skus", "catalog", backend="rabbitmq")
    async def catalog(sku: Annotated[dict[str, Any], skus]) -> None: ...

    @app.subscriber("blobs", "store", backend="pubsub")
    async def blobs(blob: Annotated[Any, blob_codec]) -> None: ...

    return app


def _validate(*files: Path) -> list[dict[str, Any]]:
    """The parser's diagnostics of ``files``; fails the test on an error-severity one."""
    node = shutil.which("node")
    assert node is not None, "node (20+) is needed: it runs the AsyncAPI parser"
    assert (PARSER / "node_modules" / "@asyncapi" / "parser").is_dir(), (
        "the AsyncAPI parser is not installed: run `make asyncapi` (npm ci in tools/asyncapi)"
    )
    done = subprocess.run(
        [node, str(PARSER / "validate.mjs"), *map(str, files)], capture_output=True, text=True, timeout=120
    )
    diagnostics = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    errors = [d for d in diagnostics if d["severity"] == "Error"]
    assert done.returncode == 0 and not errors, f"{errors or done.stderr}"
    return diagnostics


def test_the_documents_pass_the_official_asyncapi_parser(tmp_path: Path) -> None:
    """The example's document (from the command, YAML) and the every-kind one have no parser error."""
    example = tmp_path / "order_service.yaml"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    subprocess.run(
        [
            sys.executable,
            "-m",
            "broker",
            "asyncapi",
            "examples/order_service.py:app",
            "--yaml",
            "-o",
            str(example),
        ],
        cwd=ROOT,
        env=env,
        check=True,
        timeout=60,
    )
    every = tmp_path / "every_kind.json"
    every.write_text(json.dumps(document(every_kind_app(), title="every kind", version="1.2.3")))
    _validate(example, every)


def test_the_document_has_servers_without_credentials_and_hoisted_schemas() -> None:
    """What a reader of the document relies on: no secret, one server per backend, $defs hoisted,
    registry formats kept, protocol bindings for the consumer group."""
    written = document(every_kind_app())
    text = json.dumps(written)
    assert SECRET not in text and "sasl_mechanism" not in text
    servers = written["servers"]
    assert servers["default"] == {"host": "127.0.0.1:9092,127.0.0.1:9093", "protocol": "kafka"}
    assert {name: s["protocol"] for name, s in servers.items()} == {
        "default": "kafka",
        "nats": "nats",
        "pubsub": "googlepubsub",
        "pulsar": "pulsar",
        "rabbitmq": "amqp",
        "servicebus": "amqp",
        "redis": "redis",
        "inmem": "inmem",
    }
    assert servers["servicebus"]["host"] == "shop.servicebus.windows.net"
    components = written["components"]
    assert "$defs" not in text
    assert components["schemas"]["Address"]["properties"]["city"] == {"title": "City", "type": "string"}
    customer = components["messages"]["Customer"]["payload"]
    assert customer["properties"]["address"] == {"$ref": "#/components/schemas/Address"}
    reading = components["messages"]["readings_in"]["payload"]
    assert reading["schemaFormat"].startswith("application/vnd.apache.avro+json")
    assert reading["schema"]["name"] == "Reading"
    ledger = components["messages"]["ledger"]["payload"]
    assert ledger["schemaFormat"].startswith("application/vnd.google.protobuf")
    assert "message Order {" in ledger["schema"]
    operations = written["operations"]
    assert operations["customers"]["bindings"]["kafka"]["groupId"] == {"type": "string", "enum": ["crm"]}
    assert operations["clicks"]["bindings"]["nats"]["queue"] == "stats"
    assert operations["customers.publish"]["action"] == "send"
    assert operations["customers.dead_letter"]["channel"] == {"$ref": "#/channels/customers-dead"}
    (notes,) = [c for c in written["channels"].values() if c["address"] == "persistent://public/orders/notes"]
    assert notes["bindings"]["pulsar"] == {
        "namespace": "orders",
        "persistence": "persistent",
        "bindingVersion": "0.1.0",
    }


def test_the_docs_page_shows_the_document_the_command_writes(capsys: pytest.CaptureFixture[str]) -> None:
    """docs/asyncapi.md renders the order service's document as the command writes it today."""
    from broker.cli.main import main

    command = f"broker asyncapi {ROOT / EXAMPLE}:app --url kafka://127.0.0.1:9092 --yaml"
    args = [*command.split()[1:], "--title", "order service", "--app-version", "1.0.0"]
    assert main(args) == 0
    page = (ROOT / "docs" / "asyncapi.md").read_text()
    shown = page.split("```yaml\n", 1)[1].split("```", 1)[0]
    assert shown == capsys.readouterr().out
