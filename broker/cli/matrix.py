"""The capability matrix (backend x capability, with the native mechanism behind each).

Generated from each installed backend's ``capabilities``: the README's matrix is this output
(a test compares them), so the table can never drift from what the backends claim. A backend's
factory may name the native mechanism behind a capability in a ``mechanisms`` mapping; a cell
shows it, or ``yes``; ``—`` means the capability is not claimed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import fields

from broker.capabilities import Capabilities
from broker.connect import _factory, available_backends, connect

__all__ = ["EXAMPLE_URLS", "capability_matrix"]

#: A URL per known backend to read its default capabilities from (``connect`` never dials).
EXAMPLE_URLS: Mapping[str, str] = {
    "inmem": "inmem://capability-matrix",
    "kafka": "kafka://127.0.0.1:9092",
    "nats": "nats://127.0.0.1:4222",
    "pubsub": "pubsub://capability-matrix",
    "pulsar": "pulsar://127.0.0.1:6650",
    "servicebus": "servicebus://capability-matrix?shared_access_key_name=name&shared_access_key=key",
    "rabbitmq": "rabbitmq://guest:guest@127.0.0.1:5672/",
    "redis": "redis://127.0.0.1:6379",
    "sqs": "sqs://us-east-1",
}

_ORDER = ("inmem", "kafka", "nats", "pubsub", "pulsar", "servicebus", "rabbitmq", "redis", "sqs")


async def _capabilities(scheme: str) -> Capabilities:
    backend = connect(EXAMPLE_URLS.get(scheme, f"{scheme}://capability-matrix"))
    try:
        return backend.capabilities
    finally:
        await backend.close()


async def capability_matrix() -> str:
    """The matrix as a Markdown table, for the backends installed here, at their default settings."""
    schemes = sorted(available_backends(), key=lambda s: (_ORDER.index(s) if s in _ORDER else 99, s))
    columns: list[tuple[str, Capabilities, Mapping[str, str]]] = []
    factories: list[object] = []
    for scheme in schemes:
        factory = _factory(scheme)
        if any(factory is seen for seen in factories):
            continue  # another scheme of a backend that has its column (rediss://: redis:// over TLS)
        factories.append(factory)
        caps = await _capabilities(scheme)
        mechanisms: Mapping[str, str] = getattr(factory, "mechanisms", {})
        columns.append((scheme, caps, mechanisms))
    lines = [
        "| capability | " + " | ".join(f"`{scheme}://`" for scheme, _, _ in columns) + " |",
        "|---|" + "---|" * len(columns),
    ]
    for flag in fields(Capabilities):
        cells = []
        for _, caps, mechanisms in columns:
            value = getattr(caps, flag.name)
            if flag.name == "max_message_bytes":
                cells.append("—" if value is None else f"{value:,} B")
            elif value:
                cells.append(mechanisms.get(flag.name, "yes"))
            else:
                cells.append("—")
        lines.append(f"| `{flag.name}` | " + " | ".join(cells) + " |")
    return "\n".join(lines)


if __name__ == "__main__":  # pragma: no cover - `broker backends --matrix` is the entry point
    print(asyncio.run(capability_matrix()))
