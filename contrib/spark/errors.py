"""Errors of the Spark integration (all in :mod:`broker.errors`' hierarchy)."""

from __future__ import annotations

from broker.errors import BrokerError, NotSupported

__all__ = ["JavaNotFound", "SparkVersionError", "UnsupportedOnSpark"]


class JavaNotFound(BrokerError, RuntimeError):
    """No Java 17+ runtime to start Spark's JVM (``JAVA_HOME`` or ``java`` on ``PATH``)."""

    def __init__(self, detail: str, found_version: str | None = None) -> None:
        self.found_version = found_version
        super().__init__(
            f"PySpark needs a Java 17 (or later) runtime: {detail}. Install one (a headless JRE is "
            "enough, e.g. Debian/Ubuntu: apt-get install openjdk-17-jre-headless) and put its `java` "
            "on PATH, or set JAVA_HOME to it."
        )


class SparkVersionError(NotSupported):
    """The installed PySpark is too old for the requested feature."""

    def __init__(self, feature: str, needed: str, found: str) -> None:
        self.feature = feature
        self.needed = needed
        self.found = found
        super().__init__(
            f"{feature} needs PySpark {needed} or later, but PySpark {found} is installed; "
            "upgrade with: pip install -U 'polybroker[spark]'"
        )


class UnsupportedOnSpark(NotSupported):
    """A processor feature that ``run_group`` cannot run on Spark yet (joins, lookups)."""
