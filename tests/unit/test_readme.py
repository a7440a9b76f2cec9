"""The README's generated parts match what the code says."""

from __future__ import annotations

import re
from pathlib import Path

from broker.cli.matrix import capability_matrix
from broker.driver.options import PORTABLE_OPTIONS

README = Path(__file__).resolve().parents[2] / "README.md"


async def test_capability_matrix_is_generated_from_the_backends() -> None:
    text = README.read_text()
    found = re.search(r"<!-- capability-matrix:.*?-->\n(.*?)\n<!-- /capability-matrix -->", text, re.S)
    assert found, "the README lost its capability matrix"
    assert found.group(1) == await capability_matrix(), "regenerate it with: broker backends --matrix"


def test_every_portable_option_is_documented() -> None:
    text = README.read_text()
    for option in PORTABLE_OPTIONS:
        assert f"`{option.name}`" in text
