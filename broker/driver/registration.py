"""What every backend's ``registration.py`` shares: the factory base class and URL checks.

A backend registers a factory under the ``broker.backends`` entry-point group (the
:class:`~broker.driver.base.BackendFactory` protocol). The factories of this repository subclass
:class:`BackendRegistration`, which opens the backend lazily: the factory's module imports no SDK,
and :meth:`BackendRegistration.open` imports the SDK (a missing one is a
:class:`~broker.errors.MissingDependency` naming the extra to install), then the backend class.
"""

from __future__ import annotations

import abc
import importlib
from collections.abc import Mapping
from typing import Any

from broker.backend import Backend
from broker.driver.dependencies import import_for_extra
from broker.driver.settings import ParsedUrl
from broker.errors import ConfigError

__all__ = ["BackendRegistration", "no_path", "one_host"]


class BackendRegistration(abc.ABC):
    """A backend factory (:class:`~broker.driver.base.BackendFactory`) with the lazy :meth:`open`.

    A subclass names its ``extra``, ``settings_type``, ``sdk``, ``backend`` and ``mechanisms``,
    and implements :meth:`url_options`; a backend whose server runs locally adds ``dev_server()``.
    """

    #: The pip extra that installs the backend's SDK (named in ``MissingDependency``).
    extra: str = ""
    #: The settings dataclass that URL query parameters and mapping keys fill.
    settings_type: type[Any]
    #: The SDK module :meth:`open` imports first ("" for a backend without an SDK).
    sdk: str = ""
    #: The package a ``MissingDependency`` names when ``sdk`` is missing (default: ``sdk``).
    sdk_package: str | None = None
    #: The backend class, ``"module:Class"``, imported by :meth:`open` after the SDK.
    backend: str
    #: Every capability the backend can claim, with the native mechanism behind it (the capability
    #: matrix shows it); the backend's capabilities are :meth:`Capabilities.claiming
    #: <broker.capabilities.Capabilities.claiming>` these.
    mechanisms: Mapping[str, str] = {}

    @abc.abstractmethod
    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Settings named by the URL's hosts, path and credentials (the query is added by ``connect``)."""

    def open(self, settings: Any) -> Backend:
        """The backend for ``settings``: imports ``sdk`` (``MissingDependency`` naming ``extra`` when
        it is absent), then the ``backend`` class."""
        if self.sdk:
            import_for_extra(self.extra, self.sdk, named=self.sdk_package)
        module, _, name = self.backend.partition(":")
        backend: Backend = getattr(importlib.import_module(module), name)(settings)
        return backend


def one_host(url: ParsedUrl, what: str) -> str | None:
    """The one host ``url`` names (None when it names none); ``ConfigError`` when it names several.

    ``what`` says what the host stands for (``"namespace"``, ``"project"``, ...) in the message.
    """
    if len(url.hosts) > 1:
        raise ConfigError(f"a {url.scheme}:// URL names one {what}, got {', '.join(url.hosts)}")
    return url.hosts[0] if url.hosts else None


def no_path(url: ParsedUrl, hint: str = "") -> None:
    """``ConfigError`` when ``url`` has a path (``hint`` says what to do instead)."""
    if url.path.strip("/"):
        tail = f"; {hint}" if hint else ""
        raise ConfigError(f"a {url.scheme}:// URL has no path, got {url.path!r}{tail}")
