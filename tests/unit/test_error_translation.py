"""Every backend translates SDK errors with one function of one shape:
``translate(exc, doing, default=BrokerError) -> BrokerError`` in ``backends/<name>/errors.py`` (RabbitMQ, a
five-file backend, keeps it in its ``mapping.py``)."""

from __future__ import annotations

import importlib
import inspect
from pathlib import Path

import pytest

from broker.errors import AckError, BrokerError

ROOT = Path(__file__).resolve().parents[2]
#: The module holding each backend's ``translate``.
TRANSLATORS = {
    p.parent.name: f"broker.backends.{p.parent.name}.errors" for p in (ROOT / "backends").glob("*/errors.py")
}
TRANSLATORS["rabbitmq"] = "broker.backends.rabbitmq.mapping"
WITH_SDK_ERRORS = sorted(TRANSLATORS)


def test_every_backend_with_sdk_errors_is_checked() -> None:
    expected = {"jetstream", "kafka", "pubsub", "pulsar", "rabbitmq", "redis", "servicebus"}
    assert expected <= set(WITH_SDK_ERRORS)


@pytest.mark.parametrize("backend", WITH_SDK_ERRORS)
def test_translate_has_one_signature(backend: str) -> None:
    module = importlib.import_module(TRANSLATORS[backend])
    translate = module.translate
    parameters = list(inspect.signature(translate).parameters.values())
    assert [p.name for p in parameters] == ["exc", "doing", "default"]
    assert parameters[2].default is BrokerError
    assert "translate" in module.__all__
    assert not hasattr(module, "wrap"), "one name per concept: translate"


@pytest.mark.parametrize("backend", WITH_SDK_ERRORS)
def test_translate_keeps_broker_errors_and_falls_back_to_default(backend: str) -> None:
    translate = importlib.import_module(TRANSLATORS[backend]).translate
    mine = AckError("already typed")
    assert translate(mine, "acking") is mine
    error = translate(ValueError("something odd"), "acking message 7", AckError)
    assert isinstance(error, BrokerError)
    assert "acking message 7" in str(error)


def test_rabbitmq_a_channel_closed_under_a_live_client_is_retryable() -> None:
    """A broker restart invalidates the channels under a publisher the application never closed:
    a retry policy must see a retryable ConnectionFailed, not ClosedError (seen in the fault suite's
    RabbitMQ restart cell: one publish given up on)."""
    aio_pika = pytest.importorskip("aio_pika")
    from broker.backends.rabbitmq.mapping import translate
    from broker.errors import ConnectionFailed

    for exc in (
        aio_pika.exceptions.ChannelInvalidStateError("No active transport in channel"),
        aio_pika.exceptions.ChannelClosed(320, "CONNECTION_FORCED - broker forced connection closure"),
    ):
        error = translate(exc, "publishing")
        assert isinstance(error, ConnectionFailed) and error.retryable, (type(exc), error)
