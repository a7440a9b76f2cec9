"""OpenTelemetry for backend authors: the optional import, and the names every span and metric carries.

``otel()`` imports the OpenTelemetry API only when telemetry is used (``MissingDependency`` naming the
``telemetry`` extra when it is absent); spans and metrics of a backend's own components (the Kafka
queue, the processor) use the same schema URL and meter name as :mod:`broker.telemetry`.
"""

from broker.telemetry._deps import Otel, otel
from broker.telemetry.core import SCHEMA_URL
from broker.telemetry.metrics import METER_NAME

__all__ = ["METER_NAME", "SCHEMA_URL", "Otel", "otel"]
