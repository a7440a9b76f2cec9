"""Azure Service Bus security, checked against our test server (tests/servicebus_fake) with a TLS
listener: verification, refusals, a rotating token credential. The test server checks no tokens and
has no authorization (see the matrix)."""

from __future__ import annotations

import logging
import ssl
import time
from typing import Any

import pytest

from broker.errors import ConnectionFailed
from tests.security.certs import Pki
from tests.security.helpers import expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "servicebus"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_servicebus_security.py")

pytest.importorskip("azure.servicebus", reason="the servicebus extra is not installed")


def _settings(server: Any, **more: Any) -> dict[str, Any]:
    return {
        "backend": "servicebus",
        "namespace": "polybroker-test.servicebus.example",
        "shared_access_key_name": "tester",
        "shared_access_key": "not-a-real-key",
        "custom_endpoint_address": f"sb://127.0.0.1:{server.port}",
        "management_endpoint": server.management_endpoint,
        "retry_total": 0,
        **more,
    }


@covers(
    B,
    "defaults",
    "the SDK's TLS context (pyamqp transport) for the tls_ca_file given and for "
    "none: CERT_REQUIRED with check_hostname; use_tls is on and no setting turns verification off",
)
def test_defaults_verify_chain_and_host_name(pki: Pki) -> None:
    from azure.servicebus._pyamqp.aio._transport_async import AsyncTransport

    from broker.backends.servicebus.connection import make_client
    from broker.backends.servicebus.settings import ServiceBusSettings

    settings = ServiceBusSettings(
        namespace="ns", sas_token="SharedAccessSignature sr=x", tls_ca_file=str(pki.ca)
    )
    client = make_client(settings)
    assert client._config.use_tls is True
    transport = AsyncTransport("127.0.0.1", port=5671, ssl_opts={"ca_certs": str(pki.ca)})
    context = transport._build_ssl_opts(transport.sslopts)
    assert context.verify_mode is ssl.CERT_REQUIRED and context.check_hostname
    assert not [f for f in ServiceBusSettings.__dataclass_fields__ if "insecure" in f or "verify" in f]


@covers(
    B,
    "tls",
    "checked against our test server: TLS with the test CA (tls_ca_file, "
    "custom_endpoint_address), publish and consume; a plaintext client on its TLS port fails at once",
)
async def test_tls_round_trip_and_the_tls_port_refuses_plaintext(
    servicebus_tls: dict[str, Any], pki: Pki
) -> None:
    good = servicebus_tls["good"]
    await round_trip(_settings(good, tls_ca_file=str(pki.ca)), unique("q"), subscription="")
    plain = {
        "backend": "servicebus",
        "connection_string": (
            f"Endpoint=sb://127.0.0.1:{good.port};SharedAccessKeyName=k;SharedAccessKey=dg==;"
            "UseDevelopmentEmulator=true"
        ),
        "management_endpoint": good.management_endpoint,
        "retry_total": 0,
    }
    await expect_refusal(plain, ConnectionFailed, "closed connection|socket", topic=unique("q"))


@covers(
    B,
    "refusals",
    "checked against our test server: untrusted CA, expired certificate and host-name "
    "mismatch are ConnectionFailed naming the verification error, at once",
)
@pytest.mark.parametrize(
    ("server", "ca", "reason"),
    [
        ("good", "untrusted_ca", "unable to get local issuer certificate"),
        ("expired", "ca", "certificate has expired"),
        ("wrong_host", "ca", "mismatch"),
    ],
)
async def test_bad_server_certificates_are_refused(
    servicebus_tls: dict[str, Any], pki: Pki, server: str, ca: str, reason: str
) -> None:
    settings = _settings(servicebus_tls[server], tls_ca_file=str(getattr(pki, ca)))
    await expect_refusal(settings, ConnectionFailed, reason, topic=unique("q"))


@covers(
    B,
    "credential_provider",
    "checked against our test server: credential= takes an azure.core "
    "async token credential; the SDK asks it for a token for each connection's CBS authorization",
    status="tested",
)
async def test_a_token_credential_is_asked_for_tokens(
    servicebus_tls: dict[str, Any], pki: Pki, caplog: pytest.LogCaptureFixture
) -> None:
    from azure.core.credentials import AccessToken

    asked: list[tuple[str, ...]] = []

    class RotatingCredential:
        """An azure.core async token credential whose token would come from a vault or a file."""

        async def get_token(self, *scopes: str, **kwargs: Any) -> AccessToken:
            asked.append(scopes)
            return AccessToken(f"sb-secret-token-{len(asked)}", int(time.time()) + 3600)

        async def close(self) -> None:
            return None

        async def __aenter__(self) -> RotatingCredential:
            return self

        async def __aexit__(self, *exc: object) -> None:
            return None

    good = servicebus_tls["good"]
    settings = _settings(good, tls_ca_file=str(pki.ca), credential=RotatingCredential())
    del settings["shared_access_key_name"], settings["shared_access_key"]
    with caplog.at_level(logging.DEBUG):
        await round_trip(settings, unique("q"), subscription="")
    assert asked, "the SDK never asked the credential for a token"
    assert "sb-secret-token" not in caplog.text
