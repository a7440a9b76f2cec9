"""Registration of ``pulsar://`` under the ``broker.backends`` entry points (imports no SDK)."""

from __future__ import annotations

from typing import Any

from broker.backends.pulsar.settings import PulsarSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration, no_path
from broker.driver.settings import ParsedUrl, with_default_port

__all__ = ["PulsarFactory", "factory"]

#: The port of a ``pulsar://`` host that names none.
DEFAULT_PORT = 6650


class PulsarFactory(BackendRegistration):
    """Builds :class:`~broker.backends.pulsar.backend.PulsarBackend` from ``pulsar://host:port[,host:port]?...``."""

    extra = "pulsar"
    settings_type = PulsarSettings
    sdk = "pulsar"
    backend = "broker.backends.pulsar.backend:PulsarBackend"
    mechanisms = {
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
        no_path(url, "it names hosts only")
        options: dict[str, Any] = {}
        if url.hosts:
            scheme = "pulsar+ssl" if url.scheme == "pulsar+ssl" else "pulsar"
            hosts = ",".join(with_default_port(h, DEFAULT_PORT) for h in url.hosts)
            options["service_url"] = f"{scheme}://{hosts}"
        options.update(url.credentials("basic_username", "basic_password"))
        return options

    def dev_server(self, port: int | None = None) -> ProcessServer:
        """A local pulsar-lite broker on ``127.0.0.1:port``, not started (use it with ``with``)."""
        from broker.backends.pulsar.devserver import pulsar_lite

        return pulsar_lite(port)


factory = PulsarFactory()
