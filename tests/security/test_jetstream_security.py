"""NATS JetStream security against real nats-servers: TLS, refusals, mutual TLS, credentials, permissions."""

from __future__ import annotations

import asyncio
import json
import logging
import ssl
import time
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.errors import AuthenticationFailed, ConnectionFailed, PermissionDenied
from tests.security.certs import Pki
from tests.security.conftest import NATS_TOKEN, NATS_USERS, NatsServers
from tests.security.helpers import assert_no_leak, expect_ping_refusal, expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "jetstream"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_jetstream_security.py")


def _settings(port: int, scheme: str = "tls", **more: Any) -> dict[str, Any]:
    return {
        "backend": "nats",
        "servers": [f"{scheme}://127.0.0.1:{port}"],
        "connect_timeout": 5,
        "max_reconnect_attempts": 0,
        **more,
    }


def _user(name: str) -> dict[str, str]:
    return {"user": name, "password": NATS_USERS[name]}


@covers(
    B,
    "defaults",
    "an empty TLS setup builds a context with CERT_REQUIRED and check_hostname; "
    "tls_insecure turns both off and logs a WARNING",
)
def test_defaults_verify_chain_and_host_name(caplog: pytest.LogCaptureFixture) -> None:
    from broker.backends.jetstream.connection import _ssl_context
    from broker.backends.jetstream.settings import JetStreamSettings

    context = _ssl_context(JetStreamSettings(servers=("tls://127.0.0.1:4222",)))
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    with caplog.at_level(logging.WARNING, "broker.backends.jetstream"):
        insecure = _ssl_context(JetStreamSettings(tls_insecure=True))
    assert insecure.verify_mode is ssl.CERT_NONE and not insecure.check_hostname
    assert "NOT verified" in caplog.text


@covers(
    B,
    "tls",
    "tls:// with the test CA: publish and consume; a plaintext client gets no further "
    "than INFO (the server answers CONNECT with an error, never PONG)",
)
async def test_tls_round_trip_and_the_tls_port_refuses_plaintext(nats_servers: NatsServers, pki: Pki) -> None:
    port = nats_servers.tls.port
    await round_trip(_settings(port, tls_ca_file=str(pki.ca), **_user("admin")), unique("tls."))
    # a plaintext client on the TLS port: the server offers TLS only, and refuses CONNECT in the clear
    async with asyncio.timeout(5):
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        info = json.loads((await reader.readline()).split(b" ", 1)[1])
        assert info["tls_required"] is True
        writer.write(b'CONNECT {"user":"admin","pass":"admin-pw","verbose":false}\r\nPING\r\n')
        await writer.drain()
        answer = await reader.read(4096)
        writer.close()
    assert b"PONG" not in answer, answer
    assert answer == b"" or answer.startswith(b"-ERR"), answer


@covers(B, "refusals", "ConnectionFailed naming the reason within 5 s (no retry loop)")
@pytest.mark.parametrize(
    ("server", "ca", "reason"),
    [
        ("tls", "untrusted_ca", "unable to get local issuer certificate"),
        ("expired", "ca", "certificate has expired"),
        ("wrong_host", "ca", "mismatch"),
    ],
)
async def test_bad_server_certificates_are_refused(
    nats_servers: NatsServers, pki: Pki, server: str, ca: str, reason: str
) -> None:
    port = getattr(nats_servers, server).port
    error = await expect_refusal(
        _settings(port, tls_ca_file=str(getattr(pki, ca)), max_reconnect_attempts=-1, **_user("admin")),
        ConnectionFailed,
        reason,
    )
    assert not isinstance(error, AuthenticationFailed)
    assert "certificate" in str(error)


async def test_a_plaintext_client_is_upgraded_or_refused_never_plain(nats_servers: NatsServers) -> None:
    # nats:// to a TLS-only server: nats-py upgrades to TLS with the system's CAs, which do not
    # trust the test CA: refused, promptly, and never a plaintext session.
    await expect_refusal(
        _settings(nats_servers.tls.port, scheme="nats", **_user("admin")), ConnectionFailed, "certificate"
    )


@covers(
    B,
    "mutual_tls",
    "accepted with a client certificate from the trusted CA; none, or one from "
    "another CA: AuthenticationFailed at once (TLS 1.3 shows it on the first read)",
)
async def test_mutual_tls(nats_servers: NatsServers, pki: Pki) -> None:
    port = nats_servers.mutual.port
    good = _settings(
        port, tls_ca_file=str(pki.ca), tls_cert_file=str(pki.client.cert), tls_key_file=str(pki.client.key)
    )
    await round_trip(good, unique("mtls."))
    without = _settings(port, tls_ca_file=str(pki.ca), max_reconnect_attempts=-1)
    error = await expect_refusal(without, AuthenticationFailed, "client certificate")
    assert error.retryable is False
    other = {
        **without,
        "tls_cert_file": str(pki.untrusted_client.cert),
        "tls_key_file": str(pki.untrusted_client.key),
    }
    await expect_refusal(other, AuthenticationFailed, "client certificate")


@covers(
    B,
    "password",
    "right password works over TLS and plain; a wrong one: AuthenticationFailed "
    "(not retryable) at connect, within seconds",
)
@pytest.mark.parametrize("server", ["tls", "plain"])
async def test_user_and_password(
    nats_servers: NatsServers, pki: Pki, server: str, caplog: pytest.LogCaptureFixture
) -> None:
    port = getattr(nats_servers, server).port
    scheme, tls = ("tls", {"tls_ca_file": str(pki.ca)}) if server == "tls" else ("nats", {})
    with caplog.at_level(logging.DEBUG):
        await round_trip(_settings(port, scheme, **tls, **_user("admin")), unique("pw."))
        wrong = _settings(
            port, scheme, **tls, user="admin", password="wr0ng-pw-4711", max_reconnect_attempts=-1
        )
        error = await expect_refusal(wrong, AuthenticationFailed, "refused the credentials")
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "wr0ng-pw-4711", NATS_USERS["admin"])


async def test_ping_logs_in_and_refuses_a_wrong_password(
    nats_servers: NatsServers, caplog: pytest.LogCaptureFixture
) -> None:
    """``ping()`` connects with the credentials: the right password answers, a wrong one is
    AuthenticationFailed at once (even with unlimited reconnection)."""
    port = nats_servers.plain.port
    async with broker.connect(_settings(port, "nats", **_user("admin"))) as backend:
        await backend.ping(timeout=10)
    wrong = _settings(port, "nats", user="admin", password="wr0ng-pw-4711", max_reconnect_attempts=-1)
    with caplog.at_level(logging.DEBUG):
        error = await expect_ping_refusal(wrong, AuthenticationFailed, "refused the credentials")
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "wr0ng-pw-4711", NATS_USERS["admin"])


@covers(B, "token", "right token works; a wrong one: AuthenticationFailed (not retryable) within seconds")
async def test_token(nats_servers: NatsServers, caplog: pytest.LogCaptureFixture) -> None:
    port = nats_servers.token.port
    with caplog.at_level(logging.DEBUG):
        await round_trip(_settings(port, "nats", token=NATS_TOKEN), unique("token."))
        error = await expect_refusal(
            _settings(port, "nats", token="not-the-t0ken", max_reconnect_attempts=-1),
            AuthenticationFailed,
            "refused the credentials",
        )
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "not-the-t0ken", NATS_TOKEN)


@covers(
    B,
    "nkey",
    "a user known by its NKEY public key logs in with its seed (nkeys_seed, signed challenge); "
    "another user's seed: AuthenticationFailed (not retryable) within seconds; the seed stays out of "
    "errors and logs. Credentials files (.creds: a user JWT beside the seed) need an operator-mode "
    "server with an account resolver, not set up here",
)
async def test_nkey(nats_servers: NatsServers, caplog: pytest.LogCaptureFixture) -> None:
    import os

    import nkeys

    port = nats_servers.nkey.port
    other = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    with caplog.at_level(logging.DEBUG):
        await round_trip(_settings(port, "nats", nkeys_seed=nats_servers.nkey_seed), unique("nkey."))
        error = await expect_refusal(
            _settings(port, "nats", nkeys_seed=other, max_reconnect_attempts=-1),
            AuthenticationFailed,
            "refused the credentials",
        )
    assert error.retryable is False
    assert_no_leak(error, caplog.text, other, nats_servers.nkey_seed)


async def _stream(port: int, name: str, subjects: list[str]) -> Any:
    import nats

    client = await nats.connect(f"nats://127.0.0.1:{port}", **_user("admin"))
    await client.jsm().add_stream(name=name, subjects=subjects)
    return client


@covers(
    B,
    "permissions",
    "publish-only user: pulling is PermissionDenied; a user denied one subject: "
    "its JetStream publish gets no PubAck and becomes PermissionDenied within 1 s with nothing "
    "stored, while allowed subjects publish and consume",
)
async def test_publish_only_user_cannot_consume(nats_servers: NatsServers) -> None:
    settings = _settings(nats_servers.plain.port, "nats", **_user("producer"))
    topic = unique("orders.")
    async with asyncio.timeout(20), broker.connect(settings) as backend:
        await backend.publisher().topic(topic).publish(OutboundMessage(b"allowed"))
        async with backend.messages(topic, unique("sub")) as consumer:
            started = time.monotonic()
            with pytest.raises(PermissionDenied, match=r"(?i)consumer\.msg\.next") as caught:
                await consumer.next_message(timeout=30)
            assert time.monotonic() - started < 5
    assert caught.value.retryable is False


@covers(B, "permissions")
async def test_subject_limited_user(nats_servers: NatsServers) -> None:
    port = nats_servers.plain.port
    admin = await _stream(port, "SECRET", ["secret.>"])
    try:
        before = (await admin.jsm().stream_info("SECRET")).state.messages
        settings = _settings(port, "nats", **_user("limited"), publish_timeout=30)
        async with asyncio.timeout(30), broker.connect(settings) as backend:
            denied = backend.publisher().topic("secret.plans")
            started = time.monotonic()
            with pytest.raises(PermissionDenied, match=r"secret\.plans") as caught:
                await denied.publish(OutboundMessage(b"must not be stored"))
            assert time.monotonic() - started < 1.0, "a denied JetStream publish must fail within 1 s"
            assert caught.value.retryable is False
            await admin.flush()
            assert (await admin.jsm().stream_info("SECRET")).state.messages == before
            # what the user may do still works on the same connection
            allowed = unique("allowed.")
            async with backend.messages(allowed, unique("sub")) as consumer:
                await backend.publisher().topic(allowed).publish(OutboundMessage(b"ok"))
                assert (await consumer.next_message(timeout=10)).data == b"ok"
            # and consuming the denied stream is refused
            async with backend.messages("secret.plans", unique("sub")) as consumer:
                with pytest.raises(PermissionDenied):
                    await consumer.next_message(timeout=30)
    finally:
        await admin.close()
