"""The example application's test module, unchanged, on real brokers through ``--polybroker-url``.

``examples/testing/test_app.py`` runs on ``inmem://`` in the unit suite (virtual time, the recorder,
injected faults). Here the same module runs against a real nats-server, a real Tansu and a real
redis-server: the tests that need virtual time or in-memory faults are skipped with the reason, and
the rest must pass — at least 3 on each broker, and never more skipped than those that need
in-memory features.

The module opens a subscription after the messages it expects were published, so on Redis, whose new
consumer group starts at the end of its stream (``start=new``), it runs with ``start=earliest``.
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Callable
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from broker.driver.devserver import ProcessServer
from tests.integration.jetstream.server import running_nats_server
from tests.integration.kafka.support import TEST_QUERY, tansu
from tests.integration.redis.server import running_redis_server

_ROOT = Path(__file__).resolve().parents[2]
_MODULE = _ROOT / "examples" / "testing" / "test_app.py"
#: Tests of the example module that need inmem:// (virtual time or injected faults).
_INMEM_ONLY = 4


def _summary(output: str, word: str) -> int:
    found = re.search(rf"(\d+) {word}", output)
    return int(found.group(1)) if found else 0


@pytest.mark.parametrize(
    ("start", "query"),
    [
        (running_nats_server, ""),
        (tansu, f"?{TEST_QUERY}"),
        (running_redis_server, "?poll_interval=0.2&start=earliest"),
    ],
    ids=["nats", "kafka", "redis"],
)
def test_the_example_test_module_runs_unchanged_on_a_real_broker(
    start: Callable[[], AbstractContextManager[ProcessServer]], query: str
) -> None:
    server: ProcessServer
    with start() as server:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "pytest",
                "-q",
                "-p",
                "no:cacheprovider",
                str(_MODULE),
                f"--polybroker-url={server.url}{query}",
                "-rs",
            ],
            capture_output=True,
            text=True,
            timeout=240,
            cwd=_ROOT,
        )
    output = result.stdout + result.stderr
    assert result.returncode == 0, output[-4000:]
    passed, skipped = _summary(output, "passed"), _summary(output, "skipped")
    assert passed >= 3, output[-4000:]
    assert skipped <= _INMEM_ONLY, f"more tests skipped than need inmem://:\n{output[-4000:]}"
    assert "inmem:// only" in output  # the skips say why
