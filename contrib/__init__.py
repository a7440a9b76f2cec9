"""Integrations on top of the core and the backends (nothing imports ``contrib``)."""
