"""Registration of ``inmem://`` under the ``broker.backends`` entry points."""

from __future__ import annotations

from typing import Any

from backends.inmem.settings import InmemSettings
from broker.backend import Backend
from broker.settings import ParsedUrl

__all__ = ["InmemFactory", "factory"]


class InmemFactory:
    """Builds :class:`~backends.inmem.backend.InmemBackend` from ``inmem://NAME?setting=value``."""

    extra = ""
    settings_type = InmemSettings

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """``inmem://NAME`` names the broker (``inmem://`` is ``default``)."""
        options: dict[str, Any] = {}
        name = (url.hosts[0] if url.hosts else "") + url.path.strip("/")
        if name:
            options["name"] = name
        return options

    def open(self, settings: InmemSettings) -> Backend:
        """The backend for ``settings``."""
        from backends.inmem.backend import InmemBackend

        return InmemBackend(settings)


factory = InmemFactory()
