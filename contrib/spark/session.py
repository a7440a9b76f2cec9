"""A local SparkSession set up the way the ``broker`` source and ``run_group`` need it.

``local_session()`` checks for Java 17+ first (:class:`~broker.contrib.spark.errors.JavaNotFound`
instead of a JVM launch failure), binds Spark to loopback, turns the UI off, uses the RocksDB
state store (``transformWithState`` requires it) and registers the ``broker`` format.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Mapping
from typing import Any

from broker.contrib.spark._compat import check_java, require_pyspark

__all__ = ["SESSION_CONF", "local_session"]

#: Settings every session running ``run_group`` needs (``transformWithState`` runs on RocksDB only).
SESSION_CONF: Mapping[str, str] = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
}


def local_session(
    app_name: str = "polybroker",
    *,
    cores: int = 2,
    task_retries: int = 1,
    conf: Mapping[str, Any] | None = None,
    log_level: str = "ERROR",
) -> Any:
    """A ``local[cores]`` SparkSession on 127.0.0.1 with the ``broker`` format registered.

    ``task_retries`` above 1 lets Spark retry a failed task inside a micro-batch
    (``local[N,F]``); ``conf`` adds or overrides Spark settings.
    """
    check_java()
    require_pyspark()
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    from pyspark.sql import SparkSession

    master = f"local[{cores}]" if task_retries <= 1 else f"local[{cores},{task_retries}]"
    builder = (
        SparkSession.builder.master(master)
        .appName(app_name)
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.sql.shuffle.partitions", str(cores))
        .config("spark.default.parallelism", str(cores))
    )
    for key, value in {**SESSION_CONF, **(conf or {})}.items():
        builder = builder.config(key, str(value))
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel(log_level)
    from broker.contrib.spark import register

    register(session)
    return session
