"""Google's Pub/Sub emulator as a local development and test server.

The emulator ships with the Google Cloud CLI: the Debian package
``google-cloud-cli-pubsub-emulator`` (or ``gcloud components install pubsub-emulator``); it
needs Java 17 or later. It opens its port a moment before it can serve, so readiness is
checked with a real API call.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import time
from pathlib import Path

from broker.driver.devserver import ProcessServer, free_port
from broker.errors import BrokerError, ConnectionFailed

__all__ = ["DEBIAN_PACKAGE", "LAUNCHER_ENV", "EmulatorNotFound", "emulator_server", "find_launcher"]

#: The Debian package that installs the emulator.
DEBIAN_PACKAGE = "google-cloud-cli-pubsub-emulator"
#: Environment variable naming the emulator's launcher script, when it is somewhere unusual.
LAUNCHER_ENV = "POLYBROKER_PUBSUB_EMULATOR"
#: The project id of the URL a dev server hands out (the emulator accepts any project).
DEV_PROJECT = "polybroker-dev"

_RELATIVE_LAUNCHER = Path("platform/pubsub-emulator/bin/cloud-pubsub-emulator")
_SDK_ROOTS = ("/usr/lib/google-cloud-sdk", "/usr/share/google-cloud-sdk", "/opt/google-cloud-sdk")


class EmulatorNotFound(BrokerError, FileNotFoundError):
    """Google's Pub/Sub emulator (or the Java it needs) is not installed."""


def _candidates() -> list[Path]:
    found: list[Path] = []
    explicit = os.environ.get(LAUNCHER_ENV)
    if explicit:
        found.append(Path(explicit))
    for variable in ("CLOUDSDK_ROOT_DIR", "GOOGLE_CLOUD_SDK_HOME"):
        root = os.environ.get(variable)
        if root:
            found.append(Path(root) / _RELATIVE_LAUNCHER)
    gcloud = shutil.which("gcloud")
    if gcloud:
        # <sdk>/bin/gcloud, possibly through a symlink in /usr/bin
        found.append(Path(gcloud).resolve().parent.parent / _RELATIVE_LAUNCHER)
    found.extend(Path(root) / _RELATIVE_LAUNCHER for root in _SDK_ROOTS)
    return found


def find_launcher() -> Path:
    """The emulator's launcher script; :class:`EmulatorNotFound` (naming the package) when absent."""
    for path in _candidates():
        if path.is_file() and os.access(path, os.X_OK):
            if shutil.which("java") is None and not os.environ.get("JAVA_HOME"):
                raise EmulatorNotFound(
                    f"the Pub/Sub emulator at {path} needs Java 17 or later, and no 'java' is on PATH "
                    "(install e.g. the Debian package openjdk-17-jre-headless, or set JAVA_HOME)"
                )
            return path
    raise EmulatorNotFound(
        "Google's Pub/Sub emulator is not installed: install the Debian package "
        f"{DEBIAN_PACKAGE} (apt-get install {DEBIAN_PACKAGE}; it needs Java 17), or run "
        f"'gcloud components install pubsub-emulator', or set {LAUNCHER_ENV} to its launcher script"
    )


def _ready_check(host: str, port: int, timeout: float) -> None:
    """Poll the emulator with a real API call until it answers (``ConnectionFailed`` after ``timeout``)."""
    import grpc  # type: ignore[import-untyped]
    from google.api_core import exceptions as api_exceptions
    from google.pubsub_v1.services.publisher import PublisherClient
    from google.pubsub_v1.services.publisher.transports import PublisherGrpcTransport

    target = f"{host}:{port}"
    channel = grpc.insecure_channel(target)
    try:
        client = PublisherClient(transport=PublisherGrpcTransport(channel=channel, host=target))
        probe = f"projects/{DEV_PROJECT}/topics/polybroker-readiness-probe"
        deadline = time.monotonic() + timeout
        last: Exception | None = None
        while time.monotonic() < deadline:
            try:
                client.get_topic(topic=probe, timeout=2.0, retry=None)
                return
            except api_exceptions.NotFound:
                return  # it answered: serving
            except Exception as exc:  # not serving yet (UNAVAILABLE, a deadline, ...)
                last = exc
                time.sleep(0.1)
        raise ConnectionFailed(f"the Pub/Sub emulator on {target} did not answer within {timeout}s: {last!r}")
    finally:
        with contextlib.suppress(Exception):
            channel.close()


def emulator_server(
    port: int | None = None,
    *,
    host: str = "127.0.0.1",
    project: str = DEV_PROJECT,
    start_timeout: float = 60.0,
) -> ProcessServer:
    """An unstarted :class:`~broker.driver.devserver.ProcessServer` running the emulator on ``host:port``.

    Its ``url`` is ``pubsub://PROJECT?emulator_host=HOST:PORT``. Raises
    :class:`EmulatorNotFound` (naming the Debian package) when the emulator is not installed.
    """
    launcher = find_launcher()
    chosen = port if port is not None else free_port(host)
    return ProcessServer(
        [str(launcher), f"--host={host}", f"--port={chosen}"],
        url=f"pubsub://{project}?emulator_host={host}:{chosen}",
        host=host,
        port=chosen,
        start_timeout=start_timeout,
        ready=lambda: _ready_check(host, chosen, start_timeout),
    )
