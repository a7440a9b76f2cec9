"""Registration of ``kafka://`` under the ``broker.backends`` entry points (imports no SDK)."""

from __future__ import annotations

from typing import Any

from broker.backends.kafka.settings import KafkaSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration
from broker.driver.settings import ParsedUrl, with_default_port
from broker.errors import ConfigError

__all__ = ["KafkaFactory", "factory"]

#: The port of a ``kafka://`` host that names none.
DEFAULT_PORT = 9092


class KafkaFactory(BackendRegistration):
    """Builds :class:`~broker.backends.kafka.backend.KafkaBackend` from ``kafka://host:port[,host:port]?...``."""

    extra = "kafka"
    settings_type = KafkaSettings
    sdk = "confluent_kafka"
    backend = "broker.backends.kafka.backend:KafkaBackend"
    mechanisms = {
        "persistent": "replicated log",
        "per_key_order": "key → partition",
        "messages": "marker-topic queue",
        "records": "consumer group",
        "nack_redelivers": "redelivery tracker",
        "delayed_nack": "tracker deadline",
        "ack_deadline": "START marker timeout",
        "in_progress": "keep-alive marker",
        "delivery_attempt": "attempt header",
        "dead_letter": "dead-letter topic",
        "competing_consumers": "partitions of a group",
        "transactions": "Kafka transactions",
        "replay": "seek to offset / time",
        "backlog_for_new_subscriptions": "new group starts earliest",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Hosts become ``bootstrap_servers`` (port 9092 when a host names none); ``user:password@``
        becomes SASL credentials. A URL without a host (``kafka://``) is a ConfigError unless its
        query names ``bootstrap_servers``: no host is assumed."""
        options: dict[str, Any] = {}
        if url.hosts:
            options["bootstrap_servers"] = tuple(with_default_port(h, DEFAULT_PORT) for h in url.hosts)
        elif "bootstrap_servers" not in url.query and "bootstrap-servers" not in url.query:
            raise ConfigError("kafka:// needs a host: kafka://host:port[,host:port]")
        options.update(url.credentials("sasl_username", "sasl_password"))
        return options

    def dev_server(self, port: int | None = None) -> ProcessServer:
        """An unstarted local Kafka-compatible broker (Tansu) for ``broker dev kafka`` and tests."""
        from broker.backends.kafka.devserver import tansu_server

        return tansu_server(port)


factory = KafkaFactory()
