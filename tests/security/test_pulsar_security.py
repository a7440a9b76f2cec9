"""Pulsar security: the client's TLS verification against TLS listeners here; pulsar-lite has no TLS
and no authentication (see the matrix)."""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer
from broker.errors import ConnectionFailed, Timeout
from tests.security.certs import Pki
from tests.security.conftest import TlsStub
from tests.security.helpers import expect_refusal, round_trip, unique
from tests.security.matrix import covers

B = "pulsar"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_pulsar_security.py")

pytest.importorskip("pulsar", reason="the pulsar extra (pulsar-client) is not installed")


def _settings(port: int, **more: Any) -> dict[str, Any]:
    return {
        "backend": "pulsar",
        "service_url": f"pulsar+ssl://127.0.0.1:{port}",
        "operation_timeout": 2,
        "connection_timeout": 2,
        "send_timeout": 2,
        **more,
    }


class _RecordingConfiguration:
    """Stands in for ``_pulsar.ClientConfiguration``: records every setter call."""

    def __init__(self) -> None:
        self.calls: dict[str, tuple[Any, ...]] = {}

    def __getattr__(self, name: str) -> Any:
        def setter(*args: Any) -> _RecordingConfiguration:
            self.calls[name] = args
            return self

        return setter


@covers(
    B,
    "defaults",
    "tls_validate_hostname is now on by default (the Pulsar client's own default "
    "is off) and tls_allow_insecure_connection off; turning either off logs a WARNING",
)
def test_defaults_verify_chain_and_host_name(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from broker.backends.pulsar import client
    from broker.backends.pulsar.settings import PulsarSettings

    monkeypatch.setattr(client._pulsar, "ClientConfiguration", _RecordingConfiguration)
    with caplog.at_level(logging.WARNING, "broker.backends.pulsar"):
        conf = client.client_configuration(PulsarSettings(service_url="pulsar+ssl://127.0.0.1:6651"))
    assert conf.calls["tls_validate_hostname"] == (True,)
    assert conf.calls["tls_allow_insecure_connection"] == (False,)
    assert "NOT" not in caplog.text
    for off in ({"tls_validate_hostname": False}, {"tls_allow_insecure_connection": True}):
        caplog.clear()
        with caplog.at_level(logging.WARNING, "broker.backends.pulsar"):
            client.client_configuration(PulsarSettings(service_url="pulsar+ssl://127.0.0.1:6651", **off))
        assert "NOT" in caplog.text, off


@covers(
    B,
    "refusals",
    "the real Pulsar client against a TLS listener here (pulsar-lite has no TLS): "
    "an untrusted CA, an expired certificate and a wrong host name (checked by default now) are "
    "ConnectionFailed ('certificate verify failed') at once; with the right CA the handshake "
    "completes; tls_validate_hostname=false accepts the wrong host name",
)
@pytest.mark.parametrize(("stub", "ca"), [("good", "untrusted_ca"), ("expired", "ca"), ("wrong_host", "ca")])
async def test_bad_server_certificates_are_refused(
    tls_stubs: dict[str, TlsStub], pki: Pki, stub: str, ca: str
) -> None:
    server = tls_stubs[stub]
    before = server.handshakes
    await expect_refusal(
        _settings(server.port, tls_trust_certs_file_path=str(getattr(pki, ca))),
        ConnectionFailed,
        "certificate verify failed",
        topic=unique("t"),
    )
    assert server.handshakes == before, "the client completed a handshake it should have refused"


async def test_the_right_certificate_passes_and_the_host_name_check_can_be_turned_off(
    tls_stubs: dict[str, TlsStub], pki: Pki
) -> None:
    # the listener speaks no Pulsar: past the handshake the client times out, and that is the point
    for stub, extra in (("good", {}), ("wrong_host", {"tls_validate_hostname": False})):
        server = tls_stubs[stub]
        before = server.handshakes
        await expect_refusal(
            _settings(server.port, tls_trust_certs_file_path=str(pki.ca), **extra),
            Timeout,
            "Timeout",
            topic=unique("t"),
        )
        assert server.handshakes > before, stub


@covers(
    B,
    "credential_provider",
    "token_supplier (a callable) becomes the client's token source: "
    "pulsar-lite checks no token, but the real client asks the supplier for one on connect; "
    "the token never shows in repr or describe()",
)
async def test_a_token_supplier_is_asked_for_the_token(
    pulsar_lite_server: ProcessServer, caplog: pytest.LogCaptureFixture
) -> None:
    from broker.backends.pulsar.settings import PulsarSettings
    from broker.driver.settings import describe

    asked: list[float] = []

    def supplier() -> str:
        asked.append(time.monotonic())
        return "eyJ.rotating-token.sig"

    settings = {
        "backend": "pulsar",
        "service_url": pulsar_lite_server.url,
        "subscription_type": "shared",
        "operation_timeout": 5,
        "token_supplier": supplier,
    }
    with caplog.at_level(logging.DEBUG):
        await round_trip(settings, f"persistent://public/default/{unique('tok')}")
    assert asked, "the Pulsar client never called the token supplier"
    assert "rotating-token" not in caplog.text
    typed = PulsarSettings(token_supplier=supplier)
    assert "rotating-token" not in repr(typed) and describe(typed)["token_supplier"] == "***"


@covers(
    B,
    "mutual_tls",
    "the real Pulsar client against a TLS listener here that requires a client certificate: with "
    "tls_certificate_file_path/tls_private_key_file_path the handshake completes; without one the "
    "listener refuses the handshake and the client fails within operation_timeout, with "
    "ConnectionFailed ('Connection reset by peer') or, when it retried, Timeout: the Pulsar client "
    "does not report the TLS alert",
)
async def test_mutual_tls(tls_stubs: dict[str, TlsStub], pki: Pki) -> None:
    server = tls_stubs["mutual"]
    trust = {"tls_trust_certs_file_path": str(pki.ca)}
    before = server.handshakes
    await expect_refusal(
        _settings(server.port, **trust), (ConnectionFailed, Timeout), None, topic=unique("t")
    )
    assert server.handshakes == before, "the listener accepted a client without a certificate"
    good = {
        "tls_certificate_file_path": str(pki.client.cert),
        "tls_private_key_file_path": str(pki.client.key),
    }
    await expect_refusal(_settings(server.port, **trust, **good), Timeout, "Timeout", topic=unique("t"))
    assert server.handshakes > before
