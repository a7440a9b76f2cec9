"""``broker.connect``: choose a backend by URL or mapping through the ``broker.backends`` entry points."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from importlib.metadata import entry_points
from typing import Any

from broker.backend import Backend
from broker.driver.base import BackendFactory
from broker.driver.settings import build_settings, looks_like_connection_string, parse_url, redact_url
from broker.errors import ConfigError, MissingDependency, UnknownBackend

__all__ = ["available_backends", "connect"]

ENTRY_POINT_GROUP = "broker.backends"

_lock = threading.Lock()
_registered: dict[str, Any] = {}
_loaded: dict[str, BackendFactory] = {}


def register_backend(scheme: str, factory: BackendFactory) -> None:
    """Register ``factory`` for ``scheme://`` URLs in this process (overrides an entry point)."""
    with _lock:
        _loaded[scheme.lower()] = factory


def _entry_points() -> dict[str, Any]:
    return {ep.name.lower(): ep for ep in entry_points(group=ENTRY_POINT_GROUP)}


def available_backends() -> list[str]:
    """The URL schemes with a registered backend."""
    with _lock:
        return sorted(set(_entry_points()) | set(_loaded))


def _factory(scheme: str) -> BackendFactory:
    with _lock:
        factory = _loaded.get(scheme)
        if factory is not None:
            return factory
        eps = _entry_points()
        ep = eps.get(scheme)
        if ep is None:
            raise UnknownBackend(scheme, sorted(set(eps) | set(_loaded)))
        try:
            loaded: BackendFactory = ep.load()
        except ImportError as exc:
            raise MissingDependency(scheme, exc.name or ep.value) from exc
        _loaded[scheme] = loaded
        return loaded


def _split(target: str | Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    if isinstance(target, str):
        if looks_like_connection_string(target):
            # An Azure Service Bus connection string (its keys in any order) is accepted where a URL is.
            return "servicebus", {"connection_string": target}
        parsed = parse_url(target)
        factory = _factory(parsed.scheme)
        options = factory.url_options(parsed)
        for key, value in parsed.query.items():
            if key.replace("-", "_") in options:
                raise ConfigError(f"setting {key!r} is given twice (in the URL and its query)")
            options[key] = value
        return parsed.scheme, options
    if isinstance(target, Mapping):
        options = dict(target)
        url = options.pop("url", None)
        backend = options.pop("backend", None)
        if url is not None:
            scheme, from_url = _split(str(url))
            if backend is not None and str(backend).lower() != scheme:
                raise ConfigError(f"'backend' is {backend!r} but the url's scheme is {scheme!r}")
            from_url.update(options)
            return scheme, from_url
        if backend is None:
            raise ConfigError("a broker mapping needs a 'backend' (e.g. 'kafka') or a 'url' key")
        return str(backend).lower(), options
    raise ConfigError(f"connect() takes a URL string or a mapping, got {type(target).__name__}")


def connect(target: str | Mapping[str, Any]) -> Backend:
    """Open the backend that ``target`` names.

    ``target`` is a URL (``inmem://name``, ``kafka://host:9092?group_id=...``, ...) or a mapping
    with a ``backend`` key (or a ``url`` key) plus settings. Unknown schemes raise
    :class:`~broker.errors.UnknownBackend`, unknown settings
    :class:`~broker.errors.UnknownSetting`, a missing SDK
    :class:`~broker.errors.MissingDependency` naming the extra to install.
    """
    scheme, options = _split(target)
    factory = _factory(scheme)
    settings = build_settings(factory.settings_type, options, backend=scheme)
    return factory.open(settings)


def describe_target(target: str | Mapping[str, Any]) -> str:
    """A loggable description of ``target`` with credentials removed."""
    if isinstance(target, str):
        return redact_url(target)
    return f"<{target.get('backend') or redact_url(str(target.get('url', '?')))} settings>"
