"""Lazy imports of the optional packages behind :mod:`broker.telemetry`.

``import broker`` and ``import broker.telemetry`` never import OpenTelemetry or
prometheus_client; the functions here do, when telemetry is asked for, and raise
:class:`~broker.errors.MissingDependency` naming the extra to install when the package is absent.
"""

from __future__ import annotations

import importlib
from types import ModuleType
from typing import NamedTuple

from broker.errors import MissingDependency

__all__ = ["Otel", "otel", "prometheus_client"]


class Otel(NamedTuple):
    """The OpenTelemetry API modules the instrumentation uses."""

    trace: ModuleType
    metrics: ModuleType
    context: ModuleType
    propagate: ModuleType


def otel() -> Otel:
    """The OpenTelemetry API, or ``MissingDependency`` naming the ``otel`` extra."""
    try:
        return Otel(
            importlib.import_module("opentelemetry.trace"),
            importlib.import_module("opentelemetry.metrics"),
            importlib.import_module("opentelemetry.context"),
            importlib.import_module("opentelemetry.propagate"),
        )
    except ImportError as exc:
        raise MissingDependency("otel", "opentelemetry") from exc


def prometheus_client() -> ModuleType:
    """``prometheus_client``, or ``MissingDependency`` naming the ``prometheus`` extra."""
    try:
        return importlib.import_module("prometheus_client")
    except ImportError as exc:
        raise MissingDependency("prometheus", "prometheus_client") from exc
