"""RabbitMQ security against real rabbitmq-server nodes: TLS, refusals, mutual TLS, EXTERNAL, permissions."""

from __future__ import annotations

import logging
import ssl
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.errors import AuthenticationFailed, ConnectionFailed, PermissionDenied
from tests.security.certs import Pki
from tests.security.conftest import RABBITMQ_USERS, RabbitmqServers
from tests.security.helpers import assert_no_leak, expect_ping_refusal, expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "rabbitmq"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_rabbitmq_security.py")


def _settings(port: int, user: str | None = "admin", **more: Any) -> dict[str, Any]:
    login = {"user": user, "password": RABBITMQ_USERS[user]} if user else {}
    return {"backend": "rabbitmq", "host": "127.0.0.1", "port": port, "connect_timeout": 5, **login} | more


def _tls(pki: Pki, client: bool = True, ca: str = "ca") -> dict[str, str]:
    settings = {"tls_ca_file": str(getattr(pki, ca))}
    if client:
        settings |= {"tls_cert_file": str(pki.client.cert), "tls_key_file": str(pki.client.key)}
    return settings


@covers(
    B,
    "defaults",
    "the TLS context verifies the chain (CERT_REQUIRED) and the host name; no setting turns that off",
)
def test_defaults_verify_chain_and_host_name() -> None:
    from broker.backends.rabbitmq.backend import RabbitmqConnection
    from broker.backends.rabbitmq.settings import RabbitmqSettings

    context = RabbitmqConnection(RabbitmqSettings(tls=True))._ssl_context()
    assert context is not None
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert not [f for f in RabbitmqSettings.__dataclass_fields__ if "insecure" in f or "verify" in f]


@covers(
    B,
    "tls",
    "amqps with the test CA (and a client certificate: the listener requires one): "
    "publish and consume; a plaintext client on the TLS port is reset at once",
)
async def test_tls_round_trip_and_the_tls_port_refuses_plaintext(
    rabbitmq_servers: RabbitmqServers, pki: Pki
) -> None:
    main = rabbitmq_servers.main
    await round_trip(_settings(main.tls_port, **_tls(pki)), unique("tls."))
    await expect_refusal(_settings(main.tls_port), ConnectionFailed, "reset|closed")


@covers(
    B,
    "refusals",
    "ConnectionFailed naming the verification error, at once (expired and "
    "wrong-host certificates come from a second node, chosen by the server name the client sends)",
)
@pytest.mark.parametrize(
    ("node", "host", "ca", "reason"),
    [
        ("main", "127.0.0.1", "untrusted_ca", "self-signed certificate in certificate chain"),
        ("bad", "localhost", "ca", "certificate has expired"),
        ("bad", "127.0.0.1", "ca", "mismatch"),
    ],
)
async def test_bad_server_certificates_are_refused(
    rabbitmq_servers: RabbitmqServers, pki: Pki, node: str, host: str, ca: str, reason: str
) -> None:
    port = getattr(rabbitmq_servers, node).tls_port
    error = await expect_refusal(_settings(port, host=host, **_tls(pki, ca=ca)), ConnectionFailed, reason)
    assert "certificate was rejected" in str(error)


@covers(
    B,
    "mutual_tls",
    "accepted with the client certificate; none, or one from another CA: "
    "ConnectionFailed at once, naming the client certificate (TLS 1.3: a reset on the first read)",
)
async def test_mutual_tls(rabbitmq_servers: RabbitmqServers, pki: Pki) -> None:
    port = rabbitmq_servers.main.tls_port
    await round_trip(_settings(port, **_tls(pki)), unique("mtls."))
    await expect_refusal(_settings(port, **_tls(pki, client=False)), ConnectionFailed, "client certificate")
    other = {"tls_cert_file": str(pki.untrusted_client.cert), "tls_key_file": str(pki.untrusted_client.key)}
    await expect_refusal(
        _settings(port, **_tls(pki, client=False), **other), ConnectionFailed, "client certificate"
    )


@covers(
    B,
    "password",
    "PLAIN: right password works (plain and TLS); a wrong one: AuthenticationFailed "
    "(not retryable) at connect, at once",
)
async def test_user_and_password(rabbitmq_servers: RabbitmqServers, caplog: pytest.LogCaptureFixture) -> None:
    port = rabbitmq_servers.main.port
    with caplog.at_level(logging.DEBUG):
        await round_trip(_settings(port), unique("pw."))
        wrong = {**_settings(port), "password": "wr0ng-pw-4711"}
        error = await expect_refusal(wrong, AuthenticationFailed, "refused")
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "wr0ng-pw-4711", RABBITMQ_USERS["admin"])


async def test_ping_logs_in_and_refuses_a_wrong_password(
    rabbitmq_servers: RabbitmqServers, caplog: pytest.LogCaptureFixture
) -> None:
    """``ping()`` logs in: the right password answers, a wrong one is AuthenticationFailed at once."""
    port = rabbitmq_servers.main.port
    async with broker.connect(_settings(port)) as backend:
        await backend.ping(timeout=10)
    with caplog.at_level(logging.DEBUG):
        error = await expect_ping_refusal(
            {**_settings(port), "password": "wr0ng-pw-4711"}, AuthenticationFailed, None
        )
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "wr0ng-pw-4711", RABBITMQ_USERS["admin"])


@covers(
    B,
    "external",
    "auth_mechanism=external: the client certificate's common name is the user "
    "(rabbitmq_auth_mechanism_ssl); a certificate from another CA is refused",
)
async def test_external_login_with_the_client_certificate(
    rabbitmq_servers: RabbitmqServers, pki: Pki
) -> None:
    port = rabbitmq_servers.main.tls_port
    await round_trip(_settings(port, None, auth_mechanism="external", **_tls(pki)), unique("external."))
    other = {"tls_cert_file": str(pki.untrusted_client.cert), "tls_key_file": str(pki.untrusted_client.key)}
    await expect_refusal(
        _settings(port, None, auth_mechanism="external", **_tls(pki, client=False), **other),
        ConnectionFailed,
        "client certificate",
    )


@covers(
    B,
    "permissions",
    "write-only user: publishing works, consuming is PermissionDenied; a user "
    "limited to `allowed.*` names: PermissionDenied for others, allowed ones still work; a "
    "virtual host without permissions: PermissionDenied at connect",
)
async def test_publish_only_user_cannot_consume(rabbitmq_servers: RabbitmqServers) -> None:
    settings = _settings(rabbitmq_servers.main.port, "producer")
    topic = unique("orders.")
    async with broker.connect(settings) as backend:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"allowed"), timeout=10)
    error = await expect_refusal(settings, PermissionDenied, "ACCESS_REFUSED", topic=topic, consume=True)
    assert error.retryable is False


@covers(B, "permissions")
async def test_name_limited_user_and_vhost(rabbitmq_servers: RabbitmqServers) -> None:
    port = rabbitmq_servers.main.port
    limited = _settings(port, "limited")
    error = await expect_refusal(limited, PermissionDenied, r"secret\.plans", topic="secret.plans")
    assert error.retryable is False
    await round_trip(limited, unique("allowed."), subscription="sub")
    await expect_refusal({**limited, "vhost": "restricted"}, PermissionDenied, "virtual host 'restricted'")
