"""The project's one-line description and the architecture page's folder sketch name every backend (issue 27).

The ``pyproject.toml`` description listed six brokers (RabbitMQ was missing) and the layout sketch of
``docs/architecture.md`` had no ``rabbitmq/``. Both are checked against what is registered and what is
on disk, so the next backend cannot be left out either.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]

#: The name each registered backend (entry point of ``broker.backends``) goes by in prose.
DISPLAY_NAMES = {
    "inmem": "in-memory",
    "kafka": "Kafka",
    "nats": "NATS JetStream",
    "pubsub": "Pub/Sub",
    "pulsar": "Pulsar",
    "servicebus": "Service Bus",
    "rabbitmq": "RabbitMQ",
    "redis": "Redis Streams",
    "rediss": "Redis Streams",  # the same backend over TLS
    "sqs": "SQS",
}


def _project() -> dict[str, Any]:
    with (ROOT / "pyproject.toml").open("rb") as file:
        project: dict[str, Any] = tomllib.load(file)["project"]
    return project


def test_every_registered_backend_has_a_display_name() -> None:
    registered = set(_project()["entry-points"]["broker.backends"])
    assert registered == set(DISPLAY_NAMES), "add the new backend's display name to DISPLAY_NAMES"


def test_the_description_names_every_broker() -> None:
    description: str = _project()["description"]
    missing = [name for name in DISPLAY_NAMES.values() if name not in description]
    assert not missing, f"the pyproject.toml description does not name {missing}"


def test_the_architecture_sketch_lists_every_backend_folder() -> None:
    folders = sorted(
        path.name
        for path in (ROOT / "backends").iterdir()
        if path.is_dir() and (path / "__init__.py").is_file()
    )
    assert "rabbitmq" in folders
    page = (ROOT / "docs" / "architecture.md").read_text()
    sketch = re.search(r"^## The layers\n+```\n(.*?)^```", page, re.M | re.S)
    assert sketch, "docs/architecture.md lost its layout sketch"
    missing = [name for name in folders if f"{name}/" not in sketch.group(1)]
    assert not missing, f"the layout sketch of docs/architecture.md omits {missing}"
