"""Publish-side retries (broker.publish_retry): retryable errors are tried again, others raised at once."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

import pytest

import broker
from broker.backoff import Backoff
from broker.driver.publishing import DriverPublisher, Send
from broker.errors import ConfigError, InvalidMessage, PublishError, Throttled, Timeout
from broker.message import OutboundMessage
from broker.publish_retry import retrying_publish
from broker.testing import collect

FAST = Backoff(0.0, 1.0, 0.0)


def flaky(failures: list[Exception]) -> object:
    """A middleware, placed inside the retrying one, that raises each of ``failures`` once, in order."""

    async def middleware(topic: str, messages: Sequence[OutboundMessage], send: Send) -> None:
        if failures:
            raise failures.pop(0)
        await send(messages)

    return middleware


async def test_retryable_failures_are_tried_again_and_every_message_arrives_once() -> None:
    async with broker.connect(f"inmem://retry-{uuid.uuid4().hex}") as backend:
        async with backend.messages("t", "s") as consumer:
            publisher = backend.publisher()
            assert isinstance(publisher, DriverPublisher)
            publisher.wrap_send(retrying_publish(max_attempts=3, backoff=FAST))
            publisher.wrap_send(flaky([Throttled("slow down"), Timeout("no answer")]))  # type: ignore[arg-type]
            await publisher.topic("t").batch_publish(OutboundMessage(b"1"), OutboundMessage(b"2"))
            got = await collect(consumer, 2, 5.0)
            assert sorted(m.data for m in got) == [b"1", b"2"]


async def test_a_failure_that_is_not_retryable_is_raised_at_once() -> None:
    async with broker.connect(f"inmem://retry-{uuid.uuid4().hex}") as backend:
        publisher = backend.publisher()
        assert isinstance(publisher, DriverPublisher)
        failures: list[Exception] = [InvalidMessage("bad"), Throttled("never reached")]
        publisher.wrap_send(retrying_publish(max_attempts=5, backoff=FAST))
        publisher.wrap_send(flaky(failures))  # type: ignore[arg-type]
        with pytest.raises(InvalidMessage):
            await publisher.topic("t").publish(OutboundMessage(b"x"))
        assert len(failures) == 1, "tried once only"


async def test_the_last_error_is_raised_when_the_attempts_run_out() -> None:
    async with broker.connect(f"inmem://retry-{uuid.uuid4().hex}") as backend:
        publisher = backend.publisher()
        assert isinstance(publisher, DriverPublisher)
        failures: list[Exception] = [Throttled("1"), Throttled("2"), Throttled("3"), Throttled("4")]
        publisher.wrap_send(retrying_publish(max_attempts=3, backoff=FAST))
        publisher.wrap_send(flaky(failures))  # type: ignore[arg-type]
        with pytest.raises(Throttled, match="3"):
            await publisher.topic("t").publish(OutboundMessage(b"x"))
        assert len(failures) == 1


def test_bad_settings_are_config_errors() -> None:
    with pytest.raises(ConfigError):
        retrying_publish(max_attempts=0)
    with pytest.raises(ConfigError):
        retrying_publish(backoff=0.5)  # type: ignore[arg-type]


def test_publish_errors_are_not_retryable_by_default() -> None:
    assert not PublishError("x").retryable and Throttled("x").retryable and Timeout("x").retryable
