"""Deprecated: the queue's settings are in :mod:`backends.kafka.queue.settings`.

Kept so that imports written against earlier releases keep working; importing it warns.
"""

import warnings

from backends.kafka.queue.settings import QueueSettings
from backends.kafka.queue.settings import QueueSettings as QueueConfig
from backends.kafka.queue.settings import queue_settings_for_topic as queue_config_for_topic

warnings.warn(
    "backends.kafka.queue.config is deprecated: use backends.kafka.queue.settings (QueueSettings)",
    DeprecationWarning,
    stacklevel=2,
)

__all__ = ["QueueConfig", "QueueSettings", "queue_config_for_topic"]
