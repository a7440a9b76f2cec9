"""Pipelines on Apache Spark: the ``broker`` data source and processor groups on Structured Streaming.

    import broker.contrib.spark

    spark = broker.contrib.spark.local_session()  # or your own session + broker.contrib.spark.register(spark)
    df = (spark.readStream.format("broker")
          .option("url", "kafka://127.0.0.1:9092").option("topic", "lines").load())
    query = (df.selectExpr("key", "upper(cast(value as string)) as value")
             .writeStream.format("broker").option("url", "nats://127.0.0.1:4222")
             .option("topic", "shouted").option("checkpointLocation", "/tmp/ck").start())

    query = broker.contrib.spark.run_group(spark, graph, url="kafka://...", checkpoint="/tmp/ck-counter")

Importing this package does not import PySpark; :func:`register`, :func:`local_session` and
:func:`run_group` do (``MissingDependency`` naming the ``spark`` extra when it is absent, and
:class:`JavaNotFound` when no Java 17+ runtime is there to start Spark's JVM).
"""

from __future__ import annotations

from typing import Any

from broker.contrib.spark._compat import check_java, has_read_limits, pyspark_version, require_pyspark
from broker.contrib.spark.errors import JavaNotFound, SparkVersionError, UnsupportedOnSpark

__all__ = [
    "FORMAT",
    "JavaNotFound",
    "SparkVersionError",
    "UnsupportedOnSpark",
    "check_java",
    "has_read_limits",
    "local_session",
    "pyspark_version",
    "register",
    "run_group",
    "trace_options",
]

#: The data source's format name.
FORMAT = "broker"


def register(spark: Any) -> None:
    """Register the ``broker`` format on ``spark`` (a SparkSession); safe to call again."""
    require_pyspark()
    from broker.contrib.spark.datasource import BrokerDataSource

    spark.dataSource.register(BrokerDataSource)


def local_session(app_name: str = "polybroker", **options: Any) -> Any:
    """A local SparkSession with the ``broker`` format registered (:mod:`broker.contrib.spark.session`)."""
    from broker.contrib.spark.session import local_session as build

    return build(app_name, **options)


def run_group(spark: Any, graph: Any, **options: Any) -> Any:
    """Run a processor group on Structured Streaming (:func:`broker.contrib.spark.processor.run_group`)."""
    from broker.contrib.spark.processor import run_group as run

    return run(spark, graph, **options)


def trace_options(context: Any = None, *, propagator: Any = None) -> dict[str, str]:
    """Sink options carrying the driver's current trace context (``sink.trace_options``)."""
    from broker.contrib.spark.sink import trace_options as build

    return build(context, propagator=propagator)
