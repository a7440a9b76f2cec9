"""Backends: one package per broker, each importing only ``broker`` and its own SDK."""
