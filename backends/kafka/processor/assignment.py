"""Co-partitioned group assignment for processors on Kafka.

goka installs its own ``CopartitioningStrategy`` (a sarama balance strategy) so that every member
of a processor group gets the same partition numbers of every input. confluent-kafka cannot take
a custom assignor, but librdkafka's ``range`` assignor gives exactly that for topics with equal
partition counts (which the processor checks at start-up): it hands out partition ranges by
member order, the same for each topic. So a processor group on Kafka always uses ``range``:

* :func:`group_consumer_options` forces ``partition.assignment.strategy=range`` on the group
  member it makes;
* a connection configured for another strategy (``assignment_strategy``, or
  ``partition.assignment.strategy`` in the raw ``librdkafka``/``consumer_config`` dicts), or for
  the KIP-848 protocol (``group.protocol=consumer``, where the broker assigns and no client-side
  strategy applies), is refused with :class:`~broker.errors.ConfigError` when the processor starts,
  instead of stopping later with ``NotCopartitioned``.

Logs that are not Kafka (the in-memory log assigns co-partitioned by itself) are left alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.errors import ConfigError

__all__ = [
    "COPARTITIONING_STRATEGY",
    "check_copartitioning_config",
    "group_consumer_options",
    "kafka_log_of",
]

#: The one librdkafka assignor that keeps a processor's input partitions together.
COPARTITIONING_STRATEGY = "range"


def kafka_log_of(log_port: Any) -> Any:
    """The Kafka log behind ``log_port`` (through client-id wrappers), or ``None`` for other logs."""
    seen = 0
    while log_port is not None and seen < 8:
        settings = getattr(log_port, "settings", None)
        if settings is not None and hasattr(settings, "assignment_strategy"):
            return log_port
        log_port = getattr(log_port, "inner", None)
        seen += 1
    return None


def _kafka_settings(log_port: Any) -> Any:
    kafka = kafka_log_of(log_port)
    return None if kafka is None else kafka.settings


def check_copartitioning_config(log_port: Any, group: str) -> bool:
    """Refuse a Kafka connection whose group assignment would split co-partitioned inputs.

    Returns True when ``log_port`` is a Kafka log (then the member must use ``range``), False
    for any other log. Raises :class:`ConfigError` naming the setting at fault.
    """
    settings = _kafka_settings(log_port)
    if settings is None:
        return False
    strategy = settings.assignment_strategy
    if strategy is not None and strategy.strip() != COPARTITIONING_STRATEGY:
        raise ConfigError(
            f"processor group {group!r}: assignment_strategy={strategy!r} can split co-partitioned "
            f"inputs across members; processor groups use {COPARTITIONING_STRATEGY!r} "
            "(leave assignment_strategy unset or set it to 'range')"
        )
    raw: dict[str, Any] = {}
    for extra in (getattr(settings, "librdkafka", None), getattr(settings, "consumer_config", None)):
        if isinstance(extra, Mapping):
            raw.update(extra)
    raw_strategy = raw.get("partition.assignment.strategy")
    if raw_strategy is not None and str(raw_strategy).strip() != COPARTITIONING_STRATEGY:
        raise ConfigError(
            f"processor group {group!r}: partition.assignment.strategy={raw_strategy!r} in the raw "
            f"consumer settings can split co-partitioned inputs; processor groups use "
            f"{COPARTITIONING_STRATEGY!r}"
        )
    protocol = raw.get("group.protocol")
    if protocol is not None and str(protocol).strip().lower() == "consumer":
        raise ConfigError(
            f"processor group {group!r}: group.protocol='consumer' (KIP-848) lets the broker assign "
            "partitions, which does not keep a processor's inputs co-partitioned; use the classic "
            "protocol (remove group.protocol)"
        )
    return True


def group_consumer_options(log_port: Any, group: str) -> dict[str, Any]:
    """Consumer options a processor group member needs on ``log_port`` (checked first).

    ``{"assignment_strategy": "range"}`` on Kafka, nothing on other logs.
    """
    if check_copartitioning_config(log_port, group):
        return {"assignment_strategy": COPARTITIONING_STRATEGY}
    return {}
