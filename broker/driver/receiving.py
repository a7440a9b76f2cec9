"""Receivers for backend authors: the defaults a backend's native receiver shares with the portable ones.

A backend whose broker pushes deliveries (Pub/Sub's streaming pull) writes its own receiver; it takes
the same options as :func:`broker.adapt.receiver` with the same defaults, named here (the
backoff of a failed handler's nack included).
"""

from broker.adapt.receivers import DEFAULT_DRAIN_TIMEOUT, NackDelay
from broker.backoff import DEFAULT_BACKOFF

__all__ = ["DEFAULT_BACKOFF", "DEFAULT_DRAIN_TIMEOUT", "NackDelay"]
