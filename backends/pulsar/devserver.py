"""A local Pulsar-protocol broker for development and tests: pulsar-lite.

No Apache Pulsar distribution installs with pip; the ``pulsar-lite`` wheel (a test dependency)
ships a small Pulsar-protocol broker (alpha). It is started on 127.0.0.1 with its metrics endpoint
disabled (by default it binds ``0.0.0.0:8080``) and its storage in the server's work directory.
What it gets right and wrong is listed in ``tests/integration/pulsar``; in short, use ``shared``
(or ``key_shared`` with stable membership) subscriptions, nack, ack timeout, readers, the client's
dead-letter policy; avoid exclusive/failover subscriptions, seek, and batch-index acknowledgement.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import MissingDependency

__all__ = ["CONFIG_NAME", "find_binary", "pulsar_lite"]

#: The config file written into the server's work directory.
CONFIG_NAME = "pulsar-lite.toml"

_CONFIG = """\
# Written by broker.backends.pulsar.devserver for a local development broker.
addr = "127.0.0.1:{port}"
default_partitions = {partitions}

[metrics]
enabled = false
"""


def find_binary() -> str:
    """The pulsar-lite executable: ``$PULSAR_LITE_BINARY``, the installed wheel's, or one on ``PATH``."""
    configured = os.environ.get("PULSAR_LITE_BINARY")
    if configured and os.access(configured, os.X_OK):
        return configured
    spec = importlib.util.find_spec("pulsar_lite")
    if spec is not None and spec.submodule_search_locations:
        for location in spec.submodule_search_locations:
            candidate = Path(location) / "bin" / "pulsar-lite"
            if os.access(candidate, os.X_OK):
                return str(candidate)
    found = shutil.which("pulsar-lite")
    if found:
        return found
    raise MissingDependency("test", "pulsar_lite")


def pulsar_lite(
    port: int | None = None,
    *,
    workdir: str | None = None,
    partitions: int = 0,
    log_level: str = "warn",
) -> ProcessServer:
    """A pulsar-lite server on ``127.0.0.1:port`` (a free port by default), not started yet.

    ``workdir`` keeps the data (and the config) across stop and start, for restart tests; without
    it a temporary directory is used and removed on stop. ``partitions > 0`` makes every topic the
    broker creates partitioned.
    """
    if partitions < 0:
        raise ValueError(f"partitions must be >= 0, got {partitions}")
    port = port or free_port()
    command = [
        find_binary(),
        "--config",
        CONFIG_NAME,
        "--addr",
        f"127.0.0.1:{port}",
        "--db-path",
        "pulsar-lite-data",
        "--log-level",
        log_level,
    ]
    if workdir is not None:
        Path(workdir).mkdir(parents=True, exist_ok=True)
    server = ProcessServer(
        command, url=f"pulsar://127.0.0.1:{port}", host="127.0.0.1", port=port, workdir=workdir
    )
    (server.workdir / CONFIG_NAME).write_text(_CONFIG.format(port=port, partitions=partitions))
    return server
