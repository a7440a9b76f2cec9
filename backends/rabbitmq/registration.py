"""Registration of ``rabbitmq://`` under the ``broker.backends`` entry points.

Imports no SDK: :meth:`RabbitmqFactory.open` imports ``aio_pika`` (the ``rabbitmq`` extra).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from broker.backends.rabbitmq.devserver import RabbitmqDevServer
from broker.backends.rabbitmq.settings import RabbitmqSettings
from broker.errors import ConfigError
from broker.registration import BackendRegistration, one_host
from broker.settings import ParsedUrl

__all__ = ["RabbitmqFactory", "factory"]


class RabbitmqFactory(BackendRegistration):
    """Builds :class:`~broker.backends.rabbitmq.backend.RabbitmqBackend` from ``rabbitmq://user:pass@host:port/vhost``."""

    extra = "rabbitmq"
    settings_type = RabbitmqSettings
    sdk = "aio_pika"
    backend = "broker.backends.rabbitmq.backend:RabbitmqBackend"
    mechanisms = {
        "persistent": "durable exchanges, quorum queues",
        "per_key_order": "queue order",
        "messages": "quorum queue per subscription",
        "nack_redelivers": "basic.nack requeue",
        "delayed_nack": "held by the client (emulated)",
        "ack_deadline": "client-side timer (emulated)",
        "in_progress": "timer restart (emulated)",
        "delivery_attempt": "x-delivery-count",
        "dead_letter": "dead-letter exchange, x-delivery-limit",
        "competing_consumers": "consumers of one queue",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Host and port from the URL's host, ``user:password@`` credentials, the path as vhost."""
        options: dict[str, Any] = {}
        address = one_host(url, "host")
        if address is not None:
            host, port = _host_port(address)
            options["host"] = host
            if port is not None:
                options["port"] = port
        options.update(url.credentials("user", "password", decode=True))
        path = url.path[1:] if url.path.startswith("/") else url.path
        if path:
            options["vhost"] = unquote(path)
        return options

    def dev_server(self, port: int | None = None) -> RabbitmqDevServer:
        """An unstarted local ``rabbitmq-server``; ``with factory.dev_server() as s: s.url``."""
        return RabbitmqDevServer(port)


def _host_port(host: str) -> tuple[str, int | None]:
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = host.partition(":")
    if not port:
        return name, None
    if not port.isdigit():
        raise ConfigError(f"the port of a rabbitmq:// URL must be a number, got {port!r}")
    return name, int(port)


factory = RabbitmqFactory()
