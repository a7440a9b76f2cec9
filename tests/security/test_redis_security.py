"""Redis security against real redis-servers: TLS, refusals, mutual TLS, ACL users and their permissions."""

from __future__ import annotations

import logging
import ssl
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.errors import AuthenticationFailed, ConnectionFailed, PermissionDenied
from tests.security.certs import Pki
from tests.security.conftest import REDIS_USERS, RedisServers
from tests.security.helpers import assert_no_leak, expect_ping_refusal, expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "redis"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_redis_security.py")


def _settings(port: int, user: str | None = "admin", **more: Any) -> dict[str, Any]:
    login = {"user": user, "password": REDIS_USERS[user]} if user else {}
    return {"backend": "redis", "host": "127.0.0.1", "port": port, "connect_timeout": 5, **login} | more


def _tls(pki: Pki, client: bool = False, ca: str = "ca") -> dict[str, Any]:
    settings: dict[str, Any] = {"tls": True, "tls_ca_file": str(getattr(pki, ca))}
    if client:
        settings |= {"tls_cert_file": str(pki.client.cert), "tls_key_file": str(pki.client.key)}
    return settings


@covers(
    B,
    "defaults",
    "redis-py's TLS options are set explicitly: CERT_REQUIRED and the host name checked; no setting "
    "turns either off",
)
def test_defaults_verify_chain_and_host_name() -> None:
    from broker.backends.redis.backend import RedisConnection
    from broker.backends.redis.settings import RedisSettings

    kwargs = RedisConnection(RedisSettings(tls=True)).client().connection_pool.connection_kwargs
    assert kwargs["ssl_cert_reqs"] in ("required", ssl.CERT_REQUIRED)
    assert kwargs["ssl_check_hostname"] is True
    assert not [f for f in RedisSettings.__dataclass_fields__ if "insecure" in f or "verify" in f]


@covers(
    B,
    "tls",
    "rediss:// with the test CA (settings and URL): publish and consume; a plaintext client on the TLS "
    "port is reset at once (ConnectionFailed)",
)
async def test_tls_round_trip_and_the_tls_port_refuses_plaintext(
    redis_servers: RedisServers, pki: Pki
) -> None:
    port = redis_servers.main_tls_port
    await round_trip(_settings(port, **_tls(pki)), unique("tls."))
    url = f"rediss://admin:{REDIS_USERS['admin']}@127.0.0.1:{port}?tls_ca_file={pki.ca}&connect_timeout=5"
    await round_trip(url, unique("tls-url."))
    await expect_refusal(_settings(port), ConnectionFailed, "reset|closed")


@covers(
    B,
    "refusals",
    "ConnectionFailed naming the verification error, at once (each bad certificate from a "
    "redis-server of its own)",
)
@pytest.mark.parametrize(
    ("node", "ca", "reason"),
    [
        ("main", "untrusted_ca", "self-signed certificate in certificate chain"),
        ("expired", "ca", "certificate has expired"),
        ("wrong_host", "ca", "mismatch"),
    ],
)
async def test_bad_server_certificates_are_refused(
    redis_servers: RedisServers, pki: Pki, node: str, ca: str, reason: str
) -> None:
    port = redis_servers.main_tls_port if node == "main" else getattr(redis_servers, node).port
    error = await expect_refusal(_settings(port, **_tls(pki, ca=ca)), ConnectionFailed, reason)
    assert error.retryable is True


@covers(
    B,
    "mutual_tls",
    "tls-auth-clients yes: accepted with the client certificate; none, or one from another CA: "
    "ConnectionFailed at once, naming the client certificate (TLS 1.3: an alert or a reset before "
    "the first answer)",
)
async def test_mutual_tls(redis_servers: RedisServers, pki: Pki) -> None:
    port = redis_servers.mutual.port
    await round_trip(_settings(port, **_tls(pki, client=True)), unique("mtls."))
    await expect_refusal(
        _settings(port, **_tls(pki)), ConnectionFailed, "refuses a connection without a client certificate"
    )
    await expect_refusal(
        _settings(port, None, **_tls(pki)),
        ConnectionFailed,
        "refuses a connection without a client certificate",
    )
    other = {"tls_cert_file": str(pki.untrusted_client.cert), "tls_key_file": str(pki.untrusted_client.key)}
    await expect_refusal(
        _settings(port, **_tls(pki), **other), ConnectionFailed, "refuses the client certificate"
    )


@covers(
    B,
    "password",
    "ACL users (AUTH user password), plain and TLS; a wrong password, or none while the default user "
    "is off: AuthenticationFailed (not retryable) at once; the password is in no repr, error or log line",
)
async def test_acl_user_and_password(
    redis_servers: RedisServers, pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    port = redis_servers.main.port
    secret = REDIS_USERS["admin"]
    with caplog.at_level(logging.DEBUG):
        await round_trip(_settings(port), unique("pw."))
        await round_trip(_settings(redis_servers.main_tls_port, **_tls(pki)), unique("pw-tls."))
        wrong = {**_settings(port), "password": "wr0ng-pw-4711"}
        error = await expect_refusal(wrong, AuthenticationFailed, None)
        nobody = await expect_refusal(_settings(port, None), AuthenticationFailed, None, consume=True)
        backend = broker.connect(f"redis://admin:{secret}@127.0.0.1:{port}")
        shown = f"{backend!r} {backend.settings!r}"  # type: ignore[attr-defined]
        await backend.close()
    assert error.retryable is False and nobody.retryable is False
    assert_no_leak(error, caplog.text + shown, "wr0ng-pw-4711", secret)
    assert_no_leak(nobody, "", secret)


async def test_ping_logs_in_and_refuses_a_wrong_password(
    redis_servers: RedisServers, caplog: pytest.LogCaptureFixture
) -> None:
    """``ping()`` logs in: the right password answers, a wrong one is AuthenticationFailed at once."""
    port = redis_servers.main.port
    async with broker.connect(_settings(port)) as backend:
        await backend.ping(timeout=10)
    with caplog.at_level(logging.DEBUG):
        error = await expect_ping_refusal(
            {**_settings(port), "password": "wr0ng-pw-4711"}, AuthenticationFailed, None
        )
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "wr0ng-pw-4711", REDIS_USERS["admin"])


@covers(
    B,
    "permissions",
    "ACL rules: a user without XREADGROUP/XGROUP publishes but consuming is PermissionDenied; a user "
    "without the stream commands (-@stream) is PermissionDenied both ways; a user limited to "
    "`allowed.*` keys: PermissionDenied for others, allowed ones still work",
)
async def test_user_without_the_stream_commands(redis_servers: RedisServers) -> None:
    port = redis_servers.main.port
    producer = _settings(port, "producer")
    topic = unique("orders.")
    async with broker.connect(producer) as backend:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"allowed"), timeout=10)
    error = await expect_refusal(
        producer, PermissionDenied, r"may not do this .*'xgroup\|create'", topic=topic, consume=True
    )
    assert error.retryable is False
    nostream = _settings(port, "nostream")
    await expect_refusal(nostream, PermissionDenied, "'xadd' command", topic=topic)
    await expect_refusal(nostream, PermissionDenied, "'xgroup\\|create' command", topic=topic, consume=True)


@covers(B, "permissions")
async def test_key_limited_user(redis_servers: RedisServers) -> None:
    limited = _settings(redis_servers.main.port, "limited")
    error = await expect_refusal(
        limited, PermissionDenied, "no permissions to access one of the keys", topic="secret.plans"
    )
    assert error.retryable is False
    await expect_refusal(
        limited,
        PermissionDenied,
        "no permissions to access one of the keys",
        topic="secret.plans",
        consume=True,
    )
    await round_trip(limited, unique("allowed."))
