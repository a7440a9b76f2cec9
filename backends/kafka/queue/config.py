"""Deprecated: the queue's settings are in :mod:`broker.backends.kafka.queue.settings`.

Kept so that imports written against earlier releases keep working; importing it warns.
"""

import warnings

from broker.backends.kafka.queue.settings import QueueSettings
from broker.backends.kafka.queue.settings import QueueSettings as QueueConfig
from broker.backends.kafka.queue.settings import queue_settings_for_topic as queue_config_for_topic

warnings.warn(
    "broker.backends.kafka.queue.config is deprecated: "
    "use broker.backends.kafka.queue.settings (QueueSettings)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["QueueConfig", "QueueSettings", "queue_config_for_topic"]
