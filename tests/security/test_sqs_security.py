"""Amazon SQS/SNS security, checked against moto's server (a fake of AWS, not AWS) serving HTTPS
with the test certificate and its IAM checks on: verification against the CA in the settings,
refusals, access keys, IAM denials, and no secret in errors or logs."""

from __future__ import annotations

import http.client
import logging
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.errors import AuthenticationFailed, ConnectionFailed, PermissionDenied
from tests.security.certs import Pki
from tests.security.conftest import SqsTlsServer, TlsStub
from tests.security.helpers import assert_no_leak, expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "sqs"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_sqs_security.py")

pytest.importorskip("aiobotocore", reason="the sqs extra is not installed")

from tests.integration.sqs import server as _registers_sqs  # noqa: E402,F401  (registers the backend)


def _settings(endpoint: str, keys: tuple[str, str], pki: Pki | None, **more: Any) -> dict[str, Any]:
    settings: dict[str, Any] = {
        "backend": "sqs",
        "mode": "queue",
        "endpoint_url": endpoint,
        "access_key_id": keys[0],
        "secret_access_key": keys[1],
        "wait_time": 1,
        "connect_timeout": 3,
    }
    if pki is not None:
        settings["tls_ca_file"] = str(pki.ca)
    return settings | more


@covers(
    B,
    "tls",
    "checked against moto's server (a fake) serving HTTPS: the CA given as tls_ca_file, an IAM "
    "user's keys, publish and consume; a plaintext HTTP request to its HTTPS port gets no answer",
)
@covers(
    B,
    "password",
    "the AWS counterpart: access_key_id + secret_access_key (SigV4-signed requests) of an IAM user "
    "the fake knows",
)
async def test_tls_round_trip_and_the_tls_port_refuses_plaintext(sqs_tls: SqsTlsServer, pki: Pki) -> None:
    await round_trip(_settings(sqs_tls.endpoint, sqs_tls.admin, pki), unique("q"), subscription="s")
    # a plaintext request to the HTTPS port gets no HTTP answer (through the backend it would be
    # ConnectionFailed after botocore's three attempts with backoff, about 5 s more)
    host, port = sqs_tls.endpoint.removeprefix("https://").split(":")
    plain = http.client.HTTPConnection(host, int(port), timeout=5)
    try:
        with pytest.raises((http.client.HTTPException, ConnectionError)):
            plain.request("GET", "/moto-api/")
            plain.getresponse()
    finally:
        plain.close()


@covers(
    B,
    "refusals",
    "an untrusted CA against moto's HTTPS port; an expired certificate and a host-name mismatch "
    "against a TLS listener in the test: ConnectionFailed naming the verification error, at once",
)
@pytest.mark.parametrize(
    ("server", "ca", "reason"),
    [
        ("moto", "untrusted_ca", "unable to get local issuer certificate"),
        ("expired", "ca", "certificate has expired"),
        ("wrong_host", "ca", "mismatch"),
    ],
)
async def test_bad_server_certificates_are_refused(
    sqs_tls: SqsTlsServer, tls_stubs: dict[str, TlsStub], pki: Pki, server: str, ca: str, reason: str
) -> None:
    endpoint = sqs_tls.endpoint if server == "moto" else f"https://127.0.0.1:{tls_stubs[server].port}"
    settings = _settings(endpoint, sqs_tls.admin, None, tls_ca_file=str(getattr(pki, ca)))
    await expect_refusal(settings, ConnectionFailed, reason, topic=unique("q"))


@covers(
    B,
    "password",
    "a wrong secret key and an unknown key id (with a session token) are AuthenticationFailed; "
    "neither secret nor token is in the error, its chain, the backend's repr or a log line (DEBUG, "
    "botocore's included)",
)
@pytest.mark.parametrize("which", ["wrong_secret", "unknown_key"])
async def test_wrong_keys_are_refused_and_never_shown(
    sqs_tls: SqsTlsServer, pki: Pki, which: str, caplog: pytest.LogCaptureFixture
) -> None:
    secret, token = "wr0ng-s3cret-4711", "t0ken-s3cret-4711"
    key_id = sqs_tls.admin[0] if which == "wrong_secret" else "AKIAUNKNOWN0000000000"
    settings = _settings(sqs_tls.endpoint, (key_id, secret), pki, session_token=token)
    with caplog.at_level(logging.DEBUG):
        error = await expect_refusal(
            settings, AuthenticationFailed, "refused the credentials", topic=unique("q")
        )
        backend = broker.connect(settings)
        shown = repr(backend) + repr(backend.settings)  # type: ignore[attr-defined]
    assert_no_leak(error, caplog.text + shown, secret, token)


@covers(
    B,
    "permissions",
    "an IAM user denied sqs:SendMessage and sqs:ReceiveMessage (a policy the fake checks): publish "
    "and consume are PermissionDenied, nothing is delivered; an allowed user still works (see tls)",
)
async def test_an_iam_denial_is_permission_denied(sqs_tls: SqsTlsServer, pki: Pki) -> None:
    topic = unique("q")
    limited = _settings(sqs_tls.endpoint, sqs_tls.limited, pki)
    await expect_refusal(limited, PermissionDenied, "not authorized to perform: sqs:SendMessage", topic=topic)
    await expect_refusal(
        limited, PermissionDenied, "not authorized to perform: sqs:ReceiveMessage", topic=topic, consume=True
    )
    async with broker.connect(_settings(sqs_tls.endpoint, sqs_tls.admin, pki)) as admin:
        assert await admin.backlog(topic, "s") == 0  # nothing was sent by the denied user
        await admin.publisher().topic(topic).publish(OutboundMessage(b"allowed"))


@covers(
    B,
    "defaults",
    "aiobotocore's TLS context of the SQS and SNS clients, with tls_ca_file and without (botocore's "
    "bundle): CERT_REQUIRED with check_hostname; no setting turns verification off",
    status="configuration",
)
async def test_defaults_verify_chain_and_host_name(pki: Pki) -> None:
    import ssl

    from broker.backends.sqs.backend import SqsConnection
    from broker.backends.sqs.settings import SqsSettings

    for ca in (str(pki.ca), None):
        connection = SqsConnection(
            SqsSettings(
                access_key_id="k", secret_access_key="s", endpoint_url="https://127.0.0.1:1", tls_ca_file=ca
            )
        )
        try:
            for client in await connection.clients():
                session = client._endpoint.http_session  # type: ignore[attr-defined]
                if ca:
                    assert session._verify == ca
                else:  # botocore's bundle (or AWS_CA_BUNDLE): verification stays on
                    assert session._verify not in (False, None)
                context = session._build_verify_context()
                assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
        finally:
            await connection.close()
    assert not [f for f in SqsSettings.__dataclass_fields__ if "insecure" in f or "verify" in f]
