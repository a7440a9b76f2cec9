"""librdkafka configuration dicts built from :class:`~broker.backends.kafka.settings.KafkaSettings`.

Order of precedence, lowest first: our defaults, the settings' typed fields, the raw
``librdkafka`` dict, then the role's raw dict (``producer_config`` / ``consumer_config``). Nothing
here is forced: every key can be overridden through the raw dicts.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

from broker.backends.kafka.settings import ConsumerOptions, KafkaSettings

__all__ = [
    "common_config",
    "consumer_config",
    "producer_config",
    "reader_config",
    "redacted",
    "security_config",
    "warn_if_unverified",
]

#: librdkafka's own log lines go to this logger (``logger`` config key), not to stderr.
sdk_log = logging.getLogger("broker.backends.kafka.librdkafka")
log = logging.getLogger("broker.backends.kafka")

_ACKS = {"all": "all", "leader": "1", "none": "0"}
_SECRET_WORDS = ("password", "secret", "pem", "token", "jaas", "keytab", "oauth")


def _ms(seconds: float) -> int:
    return max(0, round(seconds * 1000))


def security_config(settings: KafkaSettings) -> dict[str, Any]:
    """The ``security.protocol``, ``ssl.*`` and ``sasl.*`` keys for ``settings``."""
    out: dict[str, Any] = {}
    mechanism = settings.sasl_mechanism
    kerberos = settings.kerberos_keytab or settings.kerberos_principal or settings.kerberos_service_name
    if mechanism is None and kerberos:
        mechanism = "GSSAPI"
    if mechanism is None and settings.oauth_token_provider is not None:
        mechanism = "OAUTHBEARER"
    if mechanism is None and (settings.sasl_username or settings.sasl_password):
        mechanism = "PLAIN"
    tls = bool(
        settings.ssl_ca_location
        or settings.ssl_certificate_location
        or settings.ssl_key_location
        or settings.ssl_key_pem
        or settings.insecure_skip_verify
    )
    protocol = settings.security_protocol
    if protocol is None:
        protocol = "sasl_ssl" if mechanism else ("ssl" if tls else "plaintext")
    out["security.protocol"] = protocol
    optional = {
        "ssl.ca.location": settings.ssl_ca_location,
        "ssl.certificate.location": settings.ssl_certificate_location,
        "ssl.key.location": settings.ssl_key_location,
        "ssl.key.password": settings.ssl_key_password,
        "ssl.key.pem": settings.ssl_key_pem,
        "sasl.username": settings.sasl_username,
        "sasl.password": settings.sasl_password,
        "sasl.kerberos.service.name": settings.kerberos_service_name,
        "sasl.kerberos.principal": settings.kerberos_principal,
        "sasl.kerberos.keytab": settings.kerberos_keytab,
    }
    out.update({k: v for k, v in optional.items() if v is not None})
    if mechanism:
        out["sasl.mechanism"] = mechanism
    if settings.oauth_token_provider is not None:
        out["oauth_cb"] = settings.oauth_token_provider
    if protocol in ("ssl", "sasl_ssl"):
        # librdkafka's defaults, said explicitly: verify the chain and the host name
        out["enable.ssl.certificate.verification"] = not settings.insecure_skip_verify
        out["ssl.endpoint.identification.algorithm"] = "none" if settings.insecure_skip_verify else "https"
    return out


def warn_if_unverified(config: Mapping[str, Any]) -> None:
    """Log a WARNING when ``config`` turns off the verification of the brokers' certificates or names."""
    if str(config.get("security.protocol", "")).lower() not in ("ssl", "sasl_ssl"):
        return
    if str(config.get("enable.ssl.certificate.verification", True)).lower() in ("false", "0"):
        log.warning(
            "Kafka TLS: the brokers' certificates are NOT verified (insecure_skip_verify or "
            "enable.ssl.certificate.verification=false)"
        )
    elif str(config.get("ssl.endpoint.identification.algorithm", "https")).lower() == "none":
        log.warning(
            "Kafka TLS: the brokers' host names are NOT checked against their certificates "
            "(ssl.endpoint.identification.algorithm=none)"
        )


def common_config(settings: KafkaSettings) -> dict[str, Any]:
    """Keys every client shares: servers, client id, security, logging; then the raw ``librdkafka``."""
    config: dict[str, Any] = {
        "bootstrap.servers": settings.servers,
        "client.id": settings.client_id,
        "logger": sdk_log,
    }
    config.update(security_config(settings))
    if settings.provision != "create":
        # No client asks the broker to create a topic on a metadata request (producers do by
        # default); the raw ``librdkafka`` settings below may still say otherwise.
        config["allow.auto.create.topics"] = False
    config.update(settings.librdkafka or {})
    warn_if_unverified(config)
    return config


def producer_config(settings: KafkaSettings, *, transactional_id: str | None = None) -> dict[str, Any]:
    """A producer's configuration (transactional when ``transactional_id`` is given)."""
    config = common_config(settings)
    idempotence = settings.idempotence
    if idempotence is None:
        idempotence = settings.acks == "all"
    config.update(
        {
            "linger.ms": settings.linger * 1000,
            "batch.size": settings.batch_bytes,
            "queue.buffering.max.messages": settings.max_buffered_records,
            "acks": _ACKS[settings.acks],
            "enable.idempotence": idempotence or transactional_id is not None,
            "compression.type": settings.compression,
            "partitioner": settings.partitioner,
        }
    )
    if transactional_id is not None:
        config["transactional.id"] = transactional_id
        config["transaction.timeout.ms"] = _ms(settings.transaction_timeout)
    config.update(settings.librdkafka or {})
    config.update(settings.producer_config or {})
    return config


def _fetch_config(options: ConsumerOptions) -> dict[str, Any]:
    return {
        "fetch.min.bytes": options.fetch_min_bytes,
        "fetch.wait.max.ms": _ms(options.fetch_max_wait),
        "fetch.max.bytes": options.fetch_max_bytes,
        "max.partition.fetch.bytes": options.fetch_max_bytes,
        "isolation.level": options.isolation_level,
        # librdkafka stops fetching a partition once its local queue holds queued.min.messages
        # (100,000) and waits this long before asking again: 1 s by default, a full second of
        # idle consumer every 100,000 records for any application that drains faster.
        "fetch.queue.backoff.ms": 20,
    }


def consumer_config(settings: KafkaSettings, options: ConsumerOptions, group: str) -> dict[str, Any]:
    """A group member's configuration: manual commits, no automatic offset store."""
    config = common_config(settings)
    config.update(_fetch_config(options))
    config.update(
        {
            "group.id": group,
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": options.start,
            "session.timeout.ms": _ms(options.session_timeout),
            "heartbeat.interval.ms": _ms(options.heartbeat_interval),
            "max.poll.interval.ms": _ms(options.max_poll_interval),
        }
    )
    if options.assignment_strategy:
        config["partition.assignment.strategy"] = options.assignment_strategy
    config.update(settings.librdkafka or {})
    config.update(options.consumer_config or {})
    return config


def reader_config(settings: KafkaSettings, options: ConsumerOptions) -> dict[str, Any]:
    """A reader's configuration: assigned partitions only, no commits.

    It has no ``group.id``: librdkafka wants one even for a consumer that only assigns, so the
    reader adds a unique one unless the raw dicts name it.
    """
    config = common_config(settings)
    config.update(_fetch_config(options))
    config.update(
        {
            "enable.auto.commit": False,
            "enable.auto.offset.store": False,
            "auto.offset.reset": options.start,
        }
    )
    config.update(settings.librdkafka or {})
    config.update(options.consumer_config or {})
    return config


def redacted(config: Mapping[str, Any]) -> dict[str, Any]:
    """``config`` safe to log: credential-like values read ``'***'``."""
    return {
        key: "***" if any(word in key.lower() for word in _SECRET_WORDS) and value is not None else value
        for key, value in config.items()
    }
