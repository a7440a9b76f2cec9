"""Receivers for backend authors: the defaults a backend's native receiver shares with the portable ones.

A backend whose broker pushes deliveries (Pub/Sub's streaming pull) writes its own receiver; it takes
the same options as :func:`broker.adapt.receiver` with the same defaults, named here.
"""

from broker.adapt.receivers import DEFAULT_DRAIN_TIMEOUT, NackDelay

__all__ = ["DEFAULT_DRAIN_TIMEOUT", "NackDelay"]
