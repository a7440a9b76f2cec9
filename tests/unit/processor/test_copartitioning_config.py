"""Processor groups on Kafka force the ``range`` assignor and refuse others (issue 34, point 2).

No broker is needed: the check runs when the processor is made, before any connection.
"""

from __future__ import annotations

from typing import Any

import pytest

import broker
from broker.backends.kafka.processor import Context, Processor, define_group, input, persist
from broker.backends.kafka.processor.assignment import group_consumer_options
from broker.errors import ConfigError
from broker.log import with_client_id


def count(ctx: Context, _: str) -> None:
    ctx.set_value((ctx.value() or 0) + 1)


GRAPH = define_group("copart", input("clicks", "str", count), persist("int64"))


def kafka_log(**settings: Any) -> Any:
    return broker.connect({"url": "kafka://127.0.0.1:1", **settings}).log()


@pytest.mark.parametrize(
    "settings",
    [
        {"assignment_strategy": "roundrobin"},
        {"assignment_strategy": "cooperative-sticky"},
        {"assignment_strategy": "range,roundrobin"},
        {"consumer_config": {"partition.assignment.strategy": "roundrobin"}},
        {"librdkafka": {"partition.assignment.strategy": "cooperative-sticky"}},
        {"consumer_config": {"group.protocol": "consumer"}},
    ],
)
def test_other_assignors_are_refused_at_start(settings: dict[str, Any]) -> None:
    with pytest.raises(ConfigError, match="processor group 'copart'"):
        Processor(kafka_log(**settings), GRAPH)


def test_range_is_forced_on_kafka_even_behind_a_client_id_wrapper() -> None:
    assert group_consumer_options(kafka_log(), "g") == {"assignment_strategy": "range"}
    assert group_consumer_options(kafka_log(assignment_strategy="range"), "g") == {
        "assignment_strategy": "range"
    }
    wrapped = with_client_id(kafka_log(), "tool")
    assert group_consumer_options(wrapped, "g") == {"assignment_strategy": "range"}
    with pytest.raises(ConfigError):
        group_consumer_options(with_client_id(kafka_log(assignment_strategy="roundrobin"), "tool"), "g")


def test_the_in_memory_log_needs_nothing() -> None:
    log = broker.connect("inmem://copart-config").log()
    assert group_consumer_options(log, "g") == {}
    Processor(log, GRAPH)  # no error
