"""Fixtures of the Spark tests: one local SparkSession, one Tansu and one nats-server per session.

The Spark tests run in the normal ``pytest`` invocation. They are skipped (with the reason) only
when no Java 17 runtime is there; ``make test`` installs one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    here = Path(__file__).parent
    for item in items:
        if here in Path(str(item.fspath)).parents:
            item.add_marker(pytest.mark.spark)


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "spark: runs on the shared local SparkSession (tests/spark)")


@pytest.fixture(scope="session")
def spark(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    from broker.contrib.spark import JavaNotFound, local_session

    warehouse = tmp_path_factory.mktemp("spark-warehouse")
    try:
        session = local_session(
            "polybroker-tests",
            conf={
                "spark.sql.warehouse.dir": str(warehouse),
                "spark.driver.memory": "1g",
                # Small Arrow batches, so a failing task has published some batches already.
                "spark.sql.execution.arrow.maxRecordsPerBatch": "50",
                "spark.sql.streaming.minBatchesToRetain": "5",
            },
        )
    except JavaNotFound as exc:
        pytest.skip(str(exc))
    yield session
    session.stop()


@pytest.fixture(scope="session")
def tansu() -> Iterator[ProcessServer]:
    from broker.backends.kafka.registration import factory

    with factory.dev_server() as server:
        yield server


@pytest.fixture(scope="session")
def nats(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    from broker.backends.jetstream.registration import factory

    with factory.dev_server(store_dir=str(tmp_path_factory.mktemp("nats"))) as server:
        yield server


@pytest.fixture
def checkpoint(tmp_path: Path) -> str:
    return str(tmp_path / "checkpoint")
