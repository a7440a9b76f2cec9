"""The one place that imports confluent-kafka, so a missing SDK names the extra to install."""

from __future__ import annotations

from types import ModuleType

from broker.errors import MissingDependency

__all__ = ["admin_module", "confluent"]


def confluent() -> ModuleType:
    """The ``confluent_kafka`` module (``MissingDependency`` naming the ``kafka`` extra if absent)."""
    try:
        import confluent_kafka
    except ImportError as exc:
        raise MissingDependency("kafka", "confluent_kafka") from exc
    return confluent_kafka


def admin_module() -> ModuleType:
    """The ``confluent_kafka.admin`` module."""
    confluent()
    import confluent_kafka.admin

    return confluent_kafka.admin
