"""Registration of ``nats://`` (NATS JetStream) under the ``broker.backends`` entry points.

Imports no SDK: :meth:`JetStreamFactory.open` imports ``nats`` (the ``nats`` extra).
"""

from __future__ import annotations

from typing import Any

from broker.backends.jetstream.devserver import nats_dev_server
from broker.backends.jetstream.settings import JetStreamSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration
from broker.driver.settings import ParsedUrl

__all__ = ["JetStreamFactory", "factory"]


class JetStreamFactory(BackendRegistration):
    """Builds :class:`~broker.backends.jetstream.backend.JetStreamBackend` from ``nats://host:port?...``."""

    extra = "nats"
    settings_type = JetStreamSettings
    sdk = "nats"
    backend = "broker.backends.jetstream.backend:JetStreamBackend"
    mechanisms = {
        "persistent": "stream file storage",
        "per_key_order": "stream order, max_ack_pending",
        "messages": "durable pull consumer",
        "records": "ordered consumer",
        "nack_redelivers": "NAK",
        "delayed_nack": "NAK with delay",
        "ack_deadline": "ack_wait",
        "in_progress": "+WPI",
        "delivery_attempt": "num_delivered",
        "dead_letter": "max_deliver + dead-letter subject",
        "competing_consumers": "one durable, many pullers",
        "replay": "deliver by sequence / time",
        "backlog_for_new_subscriptions": "deliver policy all",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Servers from the URL's hosts; ``user:password@`` or ``token@`` credentials."""
        options: dict[str, Any] = {}
        if url.hosts:
            options["servers"] = tuple(f"nats://{host}" for host in url.hosts)
        if url.username is not None and url.password is not None:
            options["user"] = url.username
            options["password"] = url.password
        elif url.username is not None:
            options["token"] = url.username
        path = url.path.strip("/")
        if path:
            options["stream"] = path
        return options

    def dev_server(self, port: int | None = None, store_dir: str | None = None) -> ProcessServer:
        """An unstarted local ``nats-server -js``; ``with factory.dev_server() as s: s.url``."""
        return nats_dev_server(port, store_dir)


factory = JetStreamFactory()
