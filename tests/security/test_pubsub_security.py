"""Google Pub/Sub security at the SDK configuration level: the emulator has no TLS and no
authentication (see the matrix), so what the clients are built with is checked instead."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.security.certs import Pki
from tests.security.matrix import covers

B = "pubsub"
#: One xdist group per file: its session-scoped servers start on one worker only.
pytestmark = pytest.mark.xdist_group("security/test_pubsub_security.py")

pytest.importorskip("google.cloud.pubsub_v1", reason="the pubsub extra is not installed")


def _service_account(pki: Pki) -> dict[str, str]:
    """A service-account key file's content (the key is a test key; nothing here talks to Google)."""
    return {
        "type": "service_account",
        "project_id": "polybroker-test",
        "private_key_id": "0123456789abcdef",
        "private_key": pki.client.key.read_text(),
        "client_email": "tester@polybroker-test.iam.gserviceaccount.com",
        "client_id": "1234567890",
        "token_uri": "https://oauth2.googleapis.com/token",
    }


def _record_channels(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, Any]]:
    import grpc  # type: ignore[import-untyped]

    secure_channel = grpc.secure_channel
    made: list[tuple[str, Any]] = []

    def secure(target: str, credentials: Any, options: Any = None, compression: Any = None) -> Any:
        made.append((target, options))
        return secure_channel(target, credentials, options=options, compression=compression)

    def insecure(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"a plain-text channel was made outside the emulator: {args}")

    monkeypatch.setattr(grpc, "secure_channel", secure)
    monkeypatch.setattr(grpc, "insecure_channel", insecure)
    return made


@covers(
    B,
    "defaults",
    "outside the emulator the SDK clients get TLS channels (gRPC SSL credentials: "
    "chain and host name verified) to pubsub.googleapis.com, never a plain-text one, and no "
    "ssl_target_name_override; no setting turns verification off",
    status="configuration",
)
def test_defaults_verify_chain_and_host_name(monkeypatch: pytest.MonkeyPatch, pki: Pki) -> None:
    from google.cloud import pubsub_v1  # type: ignore[import-untyped]

    from broker.backends.pubsub.clients import Clients
    from broker.backends.pubsub.settings import PubsubSettings

    made = _record_channels(monkeypatch)
    clients = Clients(PubsubSettings(project="p", credentials_json=json.dumps(_service_account(pki))))
    publisher = clients.publisher(pubsub_v1.types.BatchSettings(), pubsub_v1.types.PublisherOptions())
    try:
        assert made, "no channel was made"
        for target, options in made:
            assert target.startswith("pubsub.googleapis.com")
            assert not [o for o in options or () if "ssl_target_name_override" in o[0]]
    finally:
        publisher.transport.close()
    assert not [f for f in PubsubSettings.__dataclass_fields__ if "insecure" in f or "verify" in f]


@covers(
    B,
    "service_account",
    "credentials_json / credentials_file load service-account credentials "
    "that the clients use; the key never appears in repr, describe() or a load error",
    status="configuration",
)
def test_service_account_credentials(pki: Pki, tmp_path: Any) -> None:
    from broker.backends.pubsub.clients import Clients
    from broker.backends.pubsub.settings import PubsubSettings
    from broker.driver.settings import describe
    from broker.errors import ConfigError

    info = _service_account(pki)
    settings = PubsubSettings(project="p", credentials_json=json.dumps(info))
    credentials = Clients(settings)._load_credentials()
    assert credentials.service_account_email == info["client_email"]
    key_line = info["private_key"].splitlines()[1]
    assert key_line not in repr(settings) and key_line not in str(describe(settings))
    broken = PubsubSettings(project="p", credentials_json=json.dumps({**info, "private_key": "x" + key_line}))
    with pytest.raises(ConfigError) as caught:
        Clients(broken)._load_credentials()
    assert key_line not in str(caught.value) and caught.value.__cause__ is None


@covers(
    B,
    "credential_provider",
    "credentials= takes a google-auth credentials object, which "
    "refreshes its own tokens; the clients use it as given",
    status="configuration",
)
def test_a_credentials_object_is_used_as_given() -> None:
    from google.auth.credentials import AnonymousCredentials

    from broker.backends.pubsub.clients import Clients
    from broker.backends.pubsub.settings import PubsubSettings
    from broker.errors import ConfigError

    rotating = AnonymousCredentials()  # type: ignore[no-untyped-call]
    settings = PubsubSettings(project="p", credentials=rotating)
    assert Clients(settings)._client_kwargs()["credentials"] is rotating
    assert "Anonymous" not in repr(settings)
    with pytest.raises(ConfigError):
        PubsubSettings(project="p", credentials=rotating, credentials_json="{}")
    with pytest.raises(ConfigError):
        PubsubSettings(project="p", credentials="a-token-string")
