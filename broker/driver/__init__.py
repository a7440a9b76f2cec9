"""The driver kit: what a backend is built from. Applications never import it.

A backend package needs the public API (:mod:`broker`, :mod:`broker.errors`, :mod:`broker.log`, ...),
its broker's SDK, and this package, nothing else of the core:

- :class:`BackendBase` (:mod:`broker.driver.base`) gives a backend resource tracking, an idempotent
  close and the portable adapters; :class:`BackendFactory` is what it registers under the
  ``broker.backends`` entry-point group (:class:`BackendRegistration` has the shared parts) or, in
  one process, with :func:`register_backend`;
- :mod:`~broker.driver.settings` builds its settings dataclass from URLs and mappings and keeps
  secrets out of reprs; :mod:`~broker.driver.provision` is the ``provision`` setting and its error;
- :mod:`~broker.driver.publishing` writes ``Publisher``/``Topic`` once over a send function;
  :mod:`~broker.driver.pulled` and :mod:`~broker.driver.pushed` write the consumers once over a
  pull or a push driver; :mod:`~broker.driver.acking` and :mod:`~broker.driver.settling` are how
  its messages settle;
- :mod:`~broker.driver.sdk_errors` maps SDK exceptions onto :mod:`broker.errors`;
- :mod:`~broker.driver.devserver` starts its server locally for tests and ``broker dev``;
- :mod:`broker.driver.testing` is the conformance kit every backend passes.

The names below are imported lazily, so importing one module of the kit does not import all of it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from broker.connect import register_backend
    from broker.driver.acking import Acker, Committer
    from broker.driver.base import BackendBase, BackendFactory, Batching
    from broker.driver.provision import check_provision
    from broker.driver.publishing import DriverPublisher, PublishDriver
    from broker.driver.registration import BackendRegistration
    from broker.driver.resources import AsyncResource
    from broker.driver.settings import secret

__all__ = [
    "Acker",
    "AsyncResource",
    "BackendBase",
    "BackendFactory",
    "BackendRegistration",
    "Batching",
    "Committer",
    "DriverPublisher",
    "PublishDriver",
    "check_provision",
    "register_backend",
    "secret",
]

_WHERE = {
    "Acker": "broker.driver.acking",
    "AsyncResource": "broker.driver.resources",
    "BackendBase": "broker.driver.base",
    "BackendFactory": "broker.driver.base",
    "BackendRegistration": "broker.driver.registration",
    "Batching": "broker.driver.base",
    "Committer": "broker.driver.acking",
    "DriverPublisher": "broker.driver.publishing",
    "PublishDriver": "broker.driver.publishing",
    "check_provision": "broker.driver.provision",
    "register_backend": "broker.connect",
    "secret": "broker.driver.settings",
}


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'broker.driver' has no attribute {name!r}")
    return getattr(importlib.import_module(module), name)


def __dir__() -> list[str]:
    return sorted(__all__)
