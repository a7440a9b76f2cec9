"""The Pulsar client a backend shares: configuration, authentication, TLS and logging."""

from __future__ import annotations

import logging
import math
from typing import Any

import _pulsar  # type: ignore[import-not-found]
import pulsar  # type: ignore[import-untyped]

from broker.backends.pulsar.sdk_log import BRIDGE
from broker.backends.pulsar.settings import PulsarSettings
from broker.errors import ConfigError

__all__ = ["client_configuration", "create_client"]

log = logging.getLogger("broker.backends.pulsar")

_LOG_LEVELS = {
    "debug": _pulsar.LoggerLevel.Debug,
    "info": _pulsar.LoggerLevel.Info,
    "warn": _pulsar.LoggerLevel.Warn,
    "error": _pulsar.LoggerLevel.Error,
}


def _authentication(settings: PulsarSettings) -> Any:
    if settings.token is not None:
        return pulsar.AuthenticationToken(settings.token).auth
    if settings.token_supplier is not None:
        return pulsar.AuthenticationToken(settings.token_supplier).auth
    if settings.oauth2 is not None:
        return pulsar.AuthenticationOauth2(settings.oauth2).auth
    if settings.basic_password is not None or settings.basic_username is not None:
        return pulsar.AuthenticationBasic(settings.basic_username or "", settings.basic_password or "").auth
    return None


def client_configuration(settings: PulsarSettings) -> Any:
    """The ``_pulsar.ClientConfiguration`` for ``settings`` (authentication, TLS, timeouts, logging)."""
    conf = _pulsar.ClientConfiguration()
    auth = _authentication(settings)
    if auth is not None:
        conf.authentication(auth)
    conf.operation_timeout_seconds(max(1, math.ceil(settings.operation_timeout)))
    conf.connection_timeout(max(1, round(settings.connection_timeout * 1000)))
    conf.io_threads(settings.io_threads)
    conf.message_listener_threads(1)
    conf.stats_interval_in_seconds(0)
    level = _LOG_LEVELS[settings.sdk_log_level]
    if settings.sdk_logger == "logging" and BRIDGE.start():
        # Through a pipe to the broker.backends.pulsar.libpulsar logger (see sdk_log): levels are
        # filtered in C++ and no client thread ever calls Python, as a Python logger would.
        conf.set_file_logger(level, BRIDGE.path)
    else:
        conf.set_console_logger(level)
    if settings.listener_name:
        conf.listener_name(settings.listener_name)
    trust = settings.tls_trust_certs_file_path
    if trust is None:
        import certifi

        trust = certifi.where()
    conf.tls_trust_certs_file_path(trust)
    if settings.url.startswith("pulsar+ssl://"):
        if settings.tls_allow_insecure_connection:
            log.warning(
                "tls_allow_insecure_connection is set: the Pulsar brokers' certificates are NOT verified"
            )
        if not settings.tls_validate_hostname:
            log.warning(
                "tls_validate_hostname is off: the Pulsar brokers' host names are NOT checked against "
                "their certificates"
            )
    conf.tls_allow_insecure_connection(settings.tls_allow_insecure_connection)
    conf.tls_validate_hostname(settings.tls_validate_hostname)
    if settings.tls_certificate_file_path is not None:
        conf.tls_certificate_file_path(settings.tls_certificate_file_path)
    if settings.tls_private_key_file_path is not None:
        conf.tls_private_key_file_path(settings.tls_private_key_file_path)
    return conf


def create_client(settings: PulsarSettings) -> Any:
    """A ``_pulsar.Client`` for ``settings``; it connects lazily, so this never blocks."""
    conf = client_configuration(settings)
    try:
        return _pulsar.Client(settings.url, conf)
    except (ValueError, _pulsar.PulsarException) as exc:
        raise ConfigError(f"the Pulsar client rejected its settings: {exc}") from exc
