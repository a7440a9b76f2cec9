"""The Kafka conformance tests that walk the record hot path, run on the pure-Python fallback.

``make test`` runs the whole Kafka conformance suite on the hot path this install selected (the
mypyc-compiled one where the package was built with a compiler). This module runs the tests that
build, read and commit records again in a process with ``POLYBROKER_NO_EXTENSIONS=1``, so the
fallback an install without a compiler uses is held to the same contract in every CI run.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("confluent_kafka", reason="the kafka extra (confluent-kafka) is not installed")

ROOT = Path(__file__).resolve().parents[2]

#: The conformance tests whose records go through ``broker.backends.kafka.fastpath``.
RECORD_PATH = (
    "test_round_trip_data_key_attributes",
    "test_per_key_order",
    "test_records_commit_on_ack_survives_close",
    "test_records_in_a_group_resume_after_commit",
    "test_bad_attributes_and_data_raise_type_errors",
)


@pytest.mark.timeout(300)
def test_the_record_path_conformance_tests_pass_on_the_pure_python_fallback() -> None:
    code = (
        "import sys, pytest; from broker.backends.kafka.mapping import FASTPATH_VARIANT; "
        "assert FASTPATH_VARIANT.startswith('pure Python'), FASTPATH_VARIANT; "
        "sys.exit(pytest.main(sys.argv[1:]))"
    )
    result = subprocess.run(
        [
            sys.executable,
            "-c",
            code,
            "-q",
            "-p",
            "no:cacheprovider",
            "-p",
            "no:randomly",
            str(ROOT / "tests" / "conformance" / "test_kafka.py"),
            "-k",
            " or ".join(RECORD_PATH),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=280,
        env={**os.environ, "POLYBROKER_NO_EXTENSIONS": "1"},
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert f"{len(RECORD_PATH)} passed" in result.stdout, result.stdout[-2000:]
