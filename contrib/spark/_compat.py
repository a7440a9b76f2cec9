"""Version and environment checks: PySpark present and new enough, Java 17+ present.

Nothing here imports PySpark at module import time. Features by PySpark version:

* 4.1: Python data sources with Arrow stream writers, ``transformWithState`` (Row API) - the
  minimum this package supports;
* 4.2: admission control (``latestOffset(start, limit)``, so ``maxRecordsPerTrigger``) and
  ``Trigger.AvailableNow`` for Python sources (``SupportsTriggerAvailableNow``), ``TwsTester``.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from collections.abc import Mapping
from functools import cache
from types import ModuleType

from broker.contrib.spark.errors import JavaNotFound, SparkVersionError
from broker.errors import MissingDependency

__all__ = [
    "MIN_JAVA",
    "MIN_PYSPARK",
    "check_java",
    "has_read_limits",
    "pyspark_version",
    "require_pyspark",
    "require_read_limits",
]

#: The oldest PySpark this package runs on.
MIN_PYSPARK = (4, 1)
#: Spark 4 runs on Java 17 or later.
MIN_JAVA = 17

_VERSION = re.compile(r'version "(\d+)(?:\.(\d+))?[^"]*"')


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = re.match(r"\d+", piece)
        parts.append(int(digits.group()) if digits else 0)
    return tuple(parts)


def require_pyspark() -> ModuleType:
    """The ``pyspark`` module; ``MissingDependency`` (extra ``spark``) or ``SparkVersionError``."""
    try:
        import pyspark
    except ImportError as exc:
        raise MissingDependency("spark", "pyspark") from exc
    found = _version_tuple(pyspark.__version__)
    if found[:2] < MIN_PYSPARK:
        raise SparkVersionError("broker.contrib.spark", "4.1", pyspark.__version__)
    return pyspark


def pyspark_version() -> tuple[int, ...]:
    """The installed PySpark version as a tuple of ints (``MissingDependency`` if absent)."""
    return _version_tuple(require_pyspark().__version__)


@cache
def has_read_limits() -> bool:
    """True when Python streaming sources get admission control and AvailableNow (PySpark 4.2+)."""
    require_pyspark()
    try:
        from pyspark.sql.streaming.datasource import ReadMaxRows, SupportsTriggerAvailableNow  # noqa: F401
    except ImportError:
        return False
    return True


def require_read_limits(feature: str) -> None:
    """Raise ``SparkVersionError`` unless the read-limit API of PySpark 4.2 is there."""
    if not has_read_limits():
        raise SparkVersionError(feature, "4.2", require_pyspark().__version__)


def _java_executable(env: Mapping[str, str]) -> str | None:
    home = env.get("JAVA_HOME")
    if home:
        candidate = os.path.join(home, "bin", "java")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("java", path=env.get("PATH", os.defpath))


def check_java(env: Mapping[str, str] | None = None) -> str:
    """The Java executable Spark will start, checked to be Java 17+; else :class:`JavaNotFound`.

    Looks where Spark's launcher looks: ``$JAVA_HOME/bin/java``, then ``java`` on ``PATH``.
    Returns the version string (``"17.0.15"``).
    """
    env = os.environ if env is None else env
    java = _java_executable(env)
    if java is None:
        where = (
            "JAVA_HOME is not set"
            if not env.get("JAVA_HOME")
            else f"JAVA_HOME={env['JAVA_HOME']!r} has no bin/java"
        )
        raise JavaNotFound(f"no `java` executable found ({where}, and none on PATH)")
    try:
        done = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, env=dict(env), check=False
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise JavaNotFound(f"running {java} -version failed: {exc}") from exc
    output = done.stderr + done.stdout
    match = _VERSION.search(output)
    if done.returncode != 0 or match is None:
        raise JavaNotFound(f"{java} -version did not report a version: {output.strip()[:200]!r}")
    major = int(match.group(1))
    if major == 1 and match.group(2):  # "1.8.0_392" is Java 8
        major = int(match.group(2))
    version = match.group(0).split('"')[1]
    if major < MIN_JAVA:
        raise JavaNotFound(f"{java} is Java {version}", found_version=version)
    return version
