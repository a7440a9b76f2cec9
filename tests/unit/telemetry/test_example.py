"""examples/observability.py runs as documented (no server)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "observability.py"


def test_observability_example_prints_one_trace_metrics_and_health() -> None:
    result = subprocess.run([sys.executable, str(EXAMPLE)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "publish orders [PRODUCER]\n  process orders [CONSUMER]" in out.replace(" system=inmem", "")
    assert "polybroker.messages.redelivered{destination=invoices,subscription=mailing,system=inmem} 1" in out
    assert (
        'polybroker_messages_nacked_total{destination="invoices",subscription="mailing",system="inmem"} 1.0'
        in out
    )
    assert "health: live=True ready=True" in out
    assert result.stderr == ""


def test_docs_metrics_page_lists_every_metric_with_its_labels() -> None:
    from broker.telemetry import METRICS

    page = (EXAMPLE.parents[1] / "docs" / "metrics.md").read_text()
    for spec in METRICS:
        row = next(line for line in page.splitlines() if f"`{spec.otel_name}`" in line)
        assert f"`{spec.prometheus_name}`" in row
        assert ", ".join(f"`{label}`" for label in spec.labels) in row
