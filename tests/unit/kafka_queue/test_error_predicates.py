"""kafka-mq-go's IsTimeoutError / IsReconnectRequired as typed predicates (issue 34, point 4)."""

from __future__ import annotations

import pytest

from broker.backends.kafka.errors import translate
from broker.backends.kafka.queue import is_reconnect_required, is_timeout_error
from broker.errors import BrokerError, ConnectionFailed, PublishError, ReceiveError, Timeout

confluent_kafka = pytest.importorskip("confluent_kafka")
KafkaError = confluent_kafka.KafkaError
KafkaException = confluent_kafka.KafkaException


@pytest.mark.parametrize(
    "code", [KafkaError._TIMED_OUT, KafkaError.REQUEST_TIMED_OUT, KafkaError._TIMED_OUT_QUEUE]
)
def test_kafka_timeouts_map_to_timeout_and_are_timeout_errors(code: int) -> None:
    wrapped = translate(KafkaException(KafkaError(code)), "polling", ReceiveError)
    assert isinstance(wrapped, Timeout)  # the Kafka -> Timeout mapping
    assert is_timeout_error(wrapped)
    assert is_timeout_error(KafkaException(KafkaError(code)))  # the raw SDK error too
    assert not is_reconnect_required(wrapped)
    try:  # a wrapping error with the translated one as its cause
        raise ReceiveError("polling the queue topic failed") from wrapped
    except ReceiveError as outer:
        assert is_timeout_error(outer)


def test_a_delivery_timeout_is_a_failed_publish_not_a_timeout() -> None:
    wrapped = translate(KafkaError(KafkaError._MSG_TIMED_OUT), "producing", PublishError)
    assert isinstance(wrapped, PublishError) and not isinstance(wrapped, Timeout)
    assert not is_timeout_error(wrapped)


def test_plain_timeouts_and_other_errors() -> None:
    assert is_timeout_error(Timeout("no message within 1s"))
    assert is_timeout_error(TimeoutError())
    assert not is_timeout_error(ConnectionFailed("down"))
    assert not is_timeout_error(None)


def test_fatal_errors_and_max_poll_exceeded_need_a_reconnect() -> None:
    fatal = translate(KafkaException(KafkaError(KafkaError._FENCED, fatal=True)), "polling", ReceiveError)
    assert is_reconnect_required(fatal)
    max_poll = translate(KafkaError(KafkaError._MAX_POLL_EXCEEDED), "polling", ReceiveError)
    assert is_reconnect_required(max_poll)
    assert is_reconnect_required(KafkaException(KafkaError(KafkaError._FATAL, fatal=True)))


@pytest.mark.parametrize(
    "exc",
    [
        KafkaException(KafkaError(KafkaError._TRANSPORT)),
        KafkaException(KafkaError(KafkaError._ALL_BROKERS_DOWN)),
        KafkaException(KafkaError(KafkaError._TIMED_OUT)),
        ConnectionError("reset by peer"),
        BrokerError("something"),
        None,
    ],
)
def test_transient_errors_need_no_reconnect(exc: BaseException | None) -> None:
    wrapped = exc if exc is None else translate(exc, "polling", ReceiveError)
    assert not is_reconnect_required(wrapped)
