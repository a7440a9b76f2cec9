"""Testing an application: waiting helpers, the publish recorder, virtual time and the pytest plugin.

The pytest plugin (:mod:`broker.testing.plugin`, loaded by the ``pytest11`` entry point) gives a test
an in-memory backend, a recorder of what it publishes, fault injection and virtual time; the same
tests run on a real broker with ``--polybroker-url``. See the Testing page of the docs.

The conformance suites that hold a backend to the portable contract are part of the driver kit:
:mod:`broker.driver.testing`.
"""

from __future__ import annotations

import warnings
from typing import Any

from broker.backend import FaultInjection
from broker.testing.recorder import PublishRecorder
from broker.testing.virtual_time import virtual_time
from broker.testing.waiting import collect, collect_records, drain, wait_until

__all__ = [
    "FaultInjection",
    "PublishRecorder",
    "collect",
    "collect_records",
    "drain",
    "virtual_time",
    "wait_until",
]

#: Names that moved to :mod:`broker.driver.testing`; importable from here, with a
#: ``DeprecationWarning``, until the release named in it.
_MOVED = {"CloudEventsSuite", "ConformanceSuite", "Harness", "TypedSuite"}


def __getattr__(name: str) -> Any:
    if name in _MOVED:
        warnings.warn(
            f"broker.testing.{name} moved to broker.driver.testing.{name}; the old path goes in 0.3.0",
            DeprecationWarning,
            stacklevel=2,
        )
        from broker.driver import testing

        return getattr(testing, name)
    raise AttributeError(f"module 'broker.testing' has no attribute {name!r}")
