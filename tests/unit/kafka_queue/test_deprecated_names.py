"""The renamed queue settings (``QueueConfig`` -> ``QueueSettings``): old names work and warn."""

from __future__ import annotations

import importlib
import sys

import pytest

import broker.backends.kafka.queue as queue
from broker.backends.kafka.queue.settings import QueueSettings


def test_queue_config_is_queue_settings_with_a_warning() -> None:
    with pytest.warns(DeprecationWarning, match="QueueSettings"):
        old = queue.QueueConfig
    assert old is QueueSettings


def test_the_old_module_warns_and_reexports() -> None:
    sys.modules.pop("broker.backends.kafka.queue.config", None)
    with pytest.warns(DeprecationWarning, match="broker.backends.kafka.queue.settings"):
        module = importlib.import_module("broker.backends.kafka.queue.config")
    assert module.QueueConfig is QueueSettings
    assert module.queue_config_for_topic("jobs", {}).message_topic == "jobs"


def test_unknown_names_still_raise() -> None:
    with pytest.raises(AttributeError):
        queue.NoSuchThing  # noqa: B018
