"""The native-names table of ``docs/interop.md`` ("Consuming what already exists") is in step with the code.

It has one row per registered backend; every setting its ``settings`` cell names (in backticks,
outside parentheses: a remark there may show values) is a field of that backend's settings or of
its per-consumer options, so renaming or removing one fails here; and each row names the settings
:data:`NATIVE` lists for its backend, the ones that point a consumer or a topic at a resource by
its own name, so a table that drops one fails too.
"""

from __future__ import annotations

import dataclasses
import importlib
import re

import pytest

from broker.connect import _factory
from broker.driver.registration import BackendRegistration
from tests.unit.test_backend_lists import DOCS, REGISTERED, named

HEADING = "## Consuming what already exists"
COLUMNS = ("backend", "topic", "subscription", "settings")

#: scheme -> the settings that name an existing resource (or say how to use it as it is).
NATIVE: dict[str, frozenset[str]] = {
    "inmem": frozenset(),
    "kafka": frozenset({"group_id"}),
    "nats": frozenset({"stream", "durable"}),
    "pubsub": frozenset({"project"}),
    "pulsar": frozenset({"subscription_type"}),
    "servicebus": frozenset({"sessions", "session_id", "sub_queue"}),
    "rabbitmq": frozenset({"queue", "binding_key", "binding_arguments", "exchange_type", "exchange_types"}),
    "redis": frozenset({"start"}),
    "sqs": frozenset({"mode", "fifo"}),
}


def documented() -> dict[str, dict[str, str]]:
    """scheme -> column -> cell, from the table under :data:`HEADING`."""
    text = (DOCS / "interop.md").read_text()
    assert HEADING in text, f"docs/interop.md has no section {HEADING!r}"
    section = text[text.index(HEADING) + len(HEADING) :]
    section = section[: section.index("\n## ")] if "\n## " in section else section
    rows: dict[str, dict[str, str]] = {}
    lines = [line for line in section.splitlines() if line.startswith("|")]
    header = [cell.strip() for cell in lines[0].strip("|").split("|")]
    assert tuple(header) == COLUMNS, header
    for line in lines[2:]:
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        schemes = named(cells[0])
        assert len(schemes) == 1, f"row {cells[0]!r} names {sorted(schemes)}, not one backend"
        (scheme,) = schemes
        assert scheme not in rows, f"two rows for {scheme}"
        rows[scheme] = dict(zip(COLUMNS, cells, strict=True))
    return rows


def setting_names(scheme: str) -> set[str]:
    """The fields of the backend's settings and of its consumer (and record) options."""
    factory = _factory(scheme)
    assert isinstance(factory, BackendRegistration)
    names = {f.name for f in dataclasses.fields(factory.settings_type)}
    module = importlib.import_module(factory.settings_type.__module__)
    for options in ("ConsumerOptions", "RecordOptions"):
        cls = getattr(module, options, None)
        if cls is not None:
            names |= {f.name for f in dataclasses.fields(cls)}
    return names


def test_the_table_has_a_row_for_every_backend() -> None:
    assert sorted(documented()) == sorted(REGISTERED)
    assert sorted(NATIVE) == sorted(REGISTERED), "NATIVE lists every registered backend"


@pytest.mark.parametrize("scheme", sorted(REGISTERED))
def test_each_row_names_real_settings_and_the_native_ones(scheme: str) -> None:
    row = documented().get(scheme)
    assert row is not None, f"docs/interop.md#consuming-what-already-exists has no row for {scheme}"
    listed = re.sub(r"\(.*?\)", "", row["settings"])  # a remark in parentheses names no setting
    shown = set(re.findall(r"`([a-z_]+)`", listed))
    unknown = shown - setting_names(scheme)
    assert not unknown, f"the {scheme} row names settings its backend does not have: {sorted(unknown)}"
    missing = NATIVE[scheme] - shown
    assert not missing, f"the {scheme} row leaves out the native-name settings {sorted(missing)}"
