"""Registration of ``pulsar://`` under the ``broker.backends`` entry points (imports no SDK)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.backend import Backend
from broker.backends.pulsar.settings import PulsarSettings
from broker.devserver import ProcessServer
from broker.errors import ConfigError, MissingDependency
from broker.settings import ParsedUrl

__all__ = ["PulsarFactory", "factory"]

DEFAULT_PORT = 6650


def _with_port(host: str) -> str:
    has_port = "]:" in host if host.startswith("[") else ":" in host
    return host if has_port else f"{host}:{DEFAULT_PORT}"


class PulsarFactory:
    """Builds :class:`~broker.backends.pulsar.backend.PulsarBackend` from ``pulsar://host:port[,host:port]?...``."""

    extra = "pulsar"
    settings_type = PulsarSettings
    #: The native mechanism behind each capability (the README's capability matrix).
    mechanisms: Mapping[str, str] = {
        "persistent": "managed ledger",
        "messages": "shared subscription",
        "records": "failover subscription",
        "nack_redelivers": "negative ack",
        "delayed_nack": "negative ack held by the client (emulated)",
        "ack_deadline": "ack timeout (≥ 10 s)",
        "delivery_attempt": "redelivery count",
        "dead_letter": "dead-letter policy",
        "competing_consumers": "shared / key_shared",
        "replay": "reader",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """The service URL from the hosts (port 6650 by default); ``user:password@`` is basic auth."""
        if url.path.strip("/"):
            raise ConfigError(f"a pulsar:// URL names hosts only, not a path: {url.path!r}")
        options: dict[str, Any] = {}
        if url.hosts:
            scheme = "pulsar+ssl" if url.scheme == "pulsar+ssl" else "pulsar"
            options["service_url"] = f"{scheme}://" + ",".join(_with_port(h) for h in url.hosts)
        if url.username is not None:
            options["basic_username"] = url.username
        if url.password is not None:
            options["basic_password"] = url.password
        return options

    def open(self, settings: PulsarSettings) -> Backend:
        """The backend for ``settings``; needs the ``pulsar-client`` package."""
        try:
            from broker.backends.pulsar.backend import PulsarBackend
        except ImportError as exc:
            if exc.name in ("pulsar", "_pulsar"):
                raise MissingDependency(self.extra, "pulsar") from exc
            raise
        return PulsarBackend(settings)

    def dev_server(self, port: int | None = None) -> ProcessServer:
        """A local pulsar-lite broker on ``127.0.0.1:port``, not started (use it with ``with``)."""
        from broker.backends.pulsar.devserver import pulsar_lite

        return pulsar_lite(port)


factory = PulsarFactory()
