"""The provisioning table of ``docs/choosing-a-broker.md`` says, per backend, the ``provision`` modes
the backend class implements (its ``provision_modes``), no more and no fewer."""

from __future__ import annotations

import importlib
import re

import pytest

from broker.connect import _factory
from broker.driver.provision import PROVISION_MODES
from broker.driver.registration import BackendRegistration
from tests.unit.test_backend_lists import DOCS, PATTERNS, REGISTERED


def documented_modes() -> dict[str, tuple[str, ...]]:
    """scheme -> the modes its row names (in backticks in the second cell, outside parentheses)."""
    text = (DOCS / "choosing-a-broker.md").read_text()
    section = text[text.index("## Provisioning") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    rows: dict[str, tuple[str, ...]] = {}
    for line in section.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if len(cells) < 2 or set(cells[0]) <= {"-"} or cells[0] == "backend":
            continue
        schemes = [scheme for scheme, pattern in PATTERNS.items() if pattern.fullmatch(cells[0])]
        if len(schemes) != 1:
            continue
        listed = re.sub(r"\(.*?\)", "", cells[1])  # a remark in parentheses names no mode
        modes = tuple(m for m in re.findall(r"`([a-z]+)`", listed) if m in PROVISION_MODES)
        rows[schemes[0]] = modes
    return rows


def implemented_modes(scheme: str) -> tuple[str, ...]:
    """The ``provision_modes`` of the backend class the scheme's factory opens."""
    factory = _factory(scheme)
    assert isinstance(factory, BackendRegistration)
    module, _, name = factory.backend.partition(":")
    return tuple(getattr(importlib.import_module(module), name).provision_modes)


def test_the_table_has_a_row_for_every_backend() -> None:
    assert sorted(documented_modes()) == sorted(REGISTERED)


@pytest.mark.parametrize("scheme", sorted(REGISTERED))
def test_each_row_names_the_modes_the_backend_implements(scheme: str) -> None:
    documented = documented_modes().get(scheme)
    assert documented == implemented_modes(scheme), (
        f"docs/choosing-a-broker.md#provisioning says {scheme} offers {documented}, "
        f"its backend class implements {implemented_modes(scheme)}"
    )
