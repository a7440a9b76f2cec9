"""A local ``redis-server``, for ``broker dev redis`` and the tests.

The binary is Debian's ``redis-server`` (``apt-get install redis-server``; ``make redis`` installs
it when missing, without starting the system service), or any ``redis-server`` on ``PATH``. The
server listens on 127.0.0.1 on a free port (never 6379, where a system server may run), keeps its
files in a directory of its own, and runs with the append-only file on and ``appendfsync always``:
every write is in the file before the server answers it, so a server killed and started again on
the same directory has every entry it confirmed. Snapshots (``save``) are off.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import MissingDependency

__all__ = ["RedisServerNotFound", "find_redis_server", "redis_dev_server"]

_BINARIES = ("/usr/bin/redis-server", "/usr/local/bin/redis-server")


class RedisServerNotFound(MissingDependency):
    """No ``redis-server`` binary was found."""

    def __init__(self) -> None:
        self.extra = "redis"
        self.module = "redis-server"
        Exception.__init__(
            self,
            "no redis-server binary was found on PATH; install Redis "
            "(Debian/Ubuntu: apt-get install redis-server, or make redis)",
        )


def find_redis_server() -> str:
    """The path of the ``redis-server`` binary: ``PATH`` first, then the usual places."""
    found = shutil.which("redis-server") or next(
        (path for path in _BINARIES if os.access(path, os.X_OK)), None
    )
    if found is None:
        raise RedisServerNotFound()
    return found


def redis_dev_server(
    port: int | None = None, data_dir: str | None = None, *, arguments: Sequence[str] = ()
) -> ProcessServer:
    """An unstarted ``redis-server`` on 127.0.0.1 (a free port unless ``port`` is given).

    Its append-only file and everything else it writes go to ``data_dir`` when given (kept after
    ``stop()``, so a server started again on it has its streams back), else to a temporary
    directory removed on stop. ``arguments`` are more ``--option value`` pairs for the server
    (later ones win: TLS ports, ACL users, ``requirepass``).
    """
    binary = find_redis_server()
    host = "127.0.0.1"
    port = port or free_port(host)
    workdir = None
    if data_dir is not None:
        Path(data_dir).mkdir(parents=True, exist_ok=True)
        workdir = str(Path(data_dir).resolve())
    command = [
        binary,
        "--bind", host,
        "--port", str(port),
        "--dir", ".",  # the ProcessServer's working directory
        "--appendonly", "yes",
        "--appendfsync", "always",
        "--save", "",
        "--protected-mode", "no",
        "--daemonize", "no",
        "--supervised", "no",
        "--logfile", "",  # the standard output: the ProcessServer's log
        "--loglevel", "warning",
        *arguments,
    ]  # fmt: skip
    return ProcessServer(command, url=f"redis://{host}:{port}", host=host, port=port, workdir=workdir)
