"""Registration of ``kafka://`` under the ``broker.backends`` entry points (imports no SDK)."""

from __future__ import annotations

from typing import Any

from backends.kafka.settings import KafkaSettings
from broker.backend import Backend
from broker.devserver import ProcessServer
from broker.settings import ParsedUrl

__all__ = ["KafkaFactory", "factory"]


class KafkaFactory:
    """Builds :class:`~backends.kafka.backend.KafkaBackend` from ``kafka://host:port[,host:port]?...``."""

    extra = "kafka"
    settings_type = KafkaSettings

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Hosts become ``bootstrap_servers``; ``user:password@`` becomes SASL credentials."""
        options: dict[str, Any] = {}
        if url.hosts:
            options["bootstrap_servers"] = tuple(h if ":" in h else f"{h}:9092" for h in url.hosts)
        if url.username:
            options["sasl_username"] = url.username
        if url.password:
            options["sasl_password"] = url.password
        return options

    def open(self, settings: KafkaSettings) -> Backend:
        """The backend for ``settings`` (``MissingDependency`` without confluent-kafka)."""
        from backends.kafka import sdk
        from backends.kafka.backend import KafkaBackend

        sdk.confluent()
        return KafkaBackend(settings)

    def dev_server(self, port: int | None = None) -> ProcessServer:
        """An unstarted local Kafka-compatible broker (Tansu) for ``broker dev kafka`` and tests."""
        from backends.kafka.devserver import tansu_server

        return tansu_server(port)


factory = KafkaFactory()
