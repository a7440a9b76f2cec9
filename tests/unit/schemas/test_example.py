"""examples/schemas.py runs as documented (in-memory broker, confluent-kafka's mock:// registry)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka.schema_registry")

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "schemas.py"


def test_schemas_example_reads_both_versions_and_sets_the_unknown_id_aside() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    assert (
        "v1 reader: {'id': 2, 'total': 20.0}  v2 reader: {'id': 2, 'total': 20.0, 'currency': 'USD'}"
        in result.stdout
    )
    assert "v2 reader: {'id': 1, 'total': 9.5, 'currency': 'EUR'}" in result.stdout
    assert "undecodable (c-3): SchemaNotFound" in result.stdout
    assert "refund: {'order': 2, 'reason': 'late'}" in result.stdout
