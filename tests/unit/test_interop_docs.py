"""docs/interop.md ("What other services see") names the wire places the mapping modules define.

Each backend's row of the table names, in the cell of the part it carries, the header, attribute,
property or field names its mapping module defines as constants (imported here): renaming a
constant without the page fails. The reverse holds too: every polybroker-defined name the page
shows (``polybroker-*``, ``Polybroker-*``, ``attr:*``) is a constant of the backend it is shown for.
"""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

import pytest

from broker.backends.jetstream import mapping as jetstream
from broker.backends.jetstream.settings import MSG_ID_HEADER
from broker.backends.pubsub import mapping as pubsub
from broker.backends.rabbitmq import mapping as rabbitmq
from broker.backends.redis import mapping as redis
from broker.backends.servicebus import mapping as servicebus
from broker.backends.servicebus.settings import ServiceBusSettings
from broker.backends.sqs import mapping as sqs

PAGE = Path(__file__).resolve().parents[2] / "docs" / "interop.md"
COLUMNS = ("payload", "key", "attributes", "content type", "adds")
_MESSAGE_ID_ATTRIBUTE = next(
    f.default for f in dataclasses.fields(ServiceBusSettings) if f.name == "message_id_attribute"
)
_ATTRIBUTE_FIELD = redis.ATTRIBUTE_PREFIX.decode() + "<name>"

#: backend -> column -> the names that cell must show (in backticks), taken from the code.
REQUIRED: dict[str, dict[str, tuple[str, ...]]] = {
    "kafka": {},
    "jetstream": {
        "key": (jetstream.KEY_HEADER,),
        "attributes": (jetstream.ENCODED_HEADER,),
        "adds": (jetstream.KEY_HEADER, jetstream.ENCODED_HEADER, MSG_ID_HEADER),
    },
    "pubsub": {
        "key": (pubsub.KEY_ATTRIBUTE,),
        "adds": (pubsub.KEY_ATTRIBUTE, pubsub.EMPTY_MARKER),
    },
    "pulsar": {},
    "servicebus": {
        "content type": (servicebus.CONTENT_TYPE_ATTRIBUTE,),
        "adds": (_MESSAGE_ID_ATTRIBUTE, servicebus.ATTEMPT_PROPERTY),
    },
    "rabbitmq": {
        "key": (rabbitmq.KEY_HEADER,),
        "attributes": (rabbitmq.ENCODED_HEADER,),
        "content type": (rabbitmq.CONTENT_TYPE_ATTRIBUTE,),
        "adds": (rabbitmq.KEY_HEADER, rabbitmq.ENCODED_HEADER),
    },
    "redis": {
        "payload": (redis.DATA_FIELD.decode(),),
        "key": (redis.KEY_FIELD.decode(),),
        "attributes": (_ATTRIBUTE_FIELD,),
    },
    "sqs": {
        "key": (sqs.KEY_ATTRIBUTE,),
        "adds": (sqs.KEY_ATTRIBUTE, sqs.BODY_ATTRIBUTE, sqs.PACKED_ATTRIBUTE),
    },
}

#: backend -> the polybroker-defined names its row and its "how to send" note may show.
CONSTANTS: dict[str, frozenset[str]] = {
    "kafka": frozenset(),
    "jetstream": frozenset({jetstream.KEY_HEADER, jetstream.ENCODED_HEADER}),
    "pubsub": frozenset({pubsub.KEY_ATTRIBUTE, pubsub.EMPTY_MARKER}),
    "pulsar": frozenset(),
    "servicebus": frozenset({servicebus.ATTEMPT_PROPERTY}),
    "rabbitmq": frozenset({rabbitmq.KEY_HEADER, rabbitmq.ENCODED_HEADER}),
    "redis": frozenset({_ATTRIBUTE_FIELD, redis.ATTRIBUTE_PREFIX.decode() + "content-type"}),
    "sqs": frozenset(),
}

#: The title each backend's "how to send" note starts with.
NOTES = {
    "kafka": "Kafka",
    "jetstream": "NATS JetStream",
    "pubsub": "Google Pub/Sub",
    "pulsar": "Apache Pulsar",
    "servicebus": "Azure Service Bus",
    "rabbitmq": "RabbitMQ",
    "redis": "Redis Streams",
    "sqs": "Amazon SQS/SNS",
}

_OURS = re.compile(r"^(?:polybroker-|attr:)", re.I)


def _code(text: str) -> set[str]:
    return set(re.findall(r"`([^`]+)`", text))


def _table() -> dict[str, dict[str, str]]:
    rows: dict[str, dict[str, str]] = {}
    for line in PAGE.read_text().splitlines():
        found = re.match(r"\| \[[^]]+\]\(backends/(\w+)\.md\)", line)
        if found:
            cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
            assert len(cells) == 1 + len(COLUMNS), line
            rows[found.group(1)] = dict(zip(COLUMNS, cells[1:], strict=True))
    return rows


def _notes() -> dict[str, str]:
    text = PAGE.read_text()
    return {
        backend: next(p for p in text.split("\n\n") if p.startswith(f"**{title}.**"))
        for backend, title in NOTES.items()
    }


def test_the_table_has_a_row_per_backend_with_a_raw_client() -> None:
    assert set(_table()) == set(REQUIRED)


@pytest.mark.parametrize("backend", sorted(REQUIRED))
def test_each_cell_names_the_constants_of_the_mapping(backend: str) -> None:
    row = _table()[backend]
    for column, names in REQUIRED[backend].items():
        missing = set(names) - _code(row[column])
        assert not missing, f"{backend}, {column}: the page does not name {sorted(missing)}: {row[column]!r}"


@pytest.mark.parametrize("backend", sorted(REQUIRED))
def test_every_polybroker_name_on_the_page_is_a_constant_of_its_backend(backend: str) -> None:
    shown = {
        name for name in _code(" ".join(_table()[backend].values()) + _notes()[backend]) if _OURS.match(name)
    }
    unknown = shown - CONSTANTS[backend]
    assert not unknown, f"{backend}: the page names {sorted(unknown)}, which the mapping does not define"


def test_how_to_send_names_where_the_key_goes() -> None:
    notes = _notes()
    assert jetstream.KEY_HEADER in _code(notes["jetstream"])
    assert pubsub.KEY_ATTRIBUTE in _code(notes["pubsub"])
    assert rabbitmq.KEY_HEADER in _code(notes["rabbitmq"])
    assert {redis.DATA_FIELD.decode(), redis.KEY_FIELD.decode(), _ATTRIBUTE_FIELD} <= _code(notes["redis"])
    assert sqs.KEY_ATTRIBUTE in _code(notes["sqs"])
