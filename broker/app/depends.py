"""Dependency injection for subscribers: ``Depends(...)`` parameters resolved by FastDepends.

A handler parameter whose default is ``Depends(f)`` (or whose annotation is
``Annotated[T, Depends(f)]``) receives what ``f`` returns, resolved per delivery by
`FastDepends <https://lancetnik.github.io/FastDepends/>`_ (``fast-depends>=3,<4``, the optional
``depends`` extra): sync and async functions, generators whose code after ``yield`` runs once the
handler returned, dependencies of dependencies. Only ``Depends()`` goes through it: payloads are
decoded by :mod:`broker.typed` (FastDepends casts nothing), and a handler without a ``Depends()``
parameter is called directly, never through the resolver.

Overrides for tests go through the app's provider::

    app.dependency_provider.override(get_db, fake_db)
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Annotated, Any, get_args, get_origin

from broker.errors import ConfigError

__all__ = ["declares_dependency", "is_dependency", "new_provider", "wrap"]

_INSTALL = "Depends() needs FastDepends: pip install 'polybroker[depends]' (fast-depends>=3,<4)"


def is_dependency(value: Any) -> bool:
    """Whether ``value`` is a FastDepends ``Depends(...)`` marker (checked without importing it)."""
    kind = type(value)
    return kind.__name__ == "Dependant" and kind.__module__.startswith("fast_depends.")


def declares_dependency(parameter: inspect.Parameter, annotation: Any) -> bool:
    """Whether ``parameter`` is resolved by FastDepends: a ``Depends()`` default or annotation."""
    if is_dependency(parameter.default):
        return True
    return get_origin(annotation) is Annotated and any(is_dependency(m) for m in get_args(annotation)[1:])


def new_provider() -> Any:
    """A FastDepends ``Provider`` (the app's dependency overrides)."""
    try:
        from fast_depends import Provider
    except ImportError as exc:  # pragma: no cover - the extra is installed wherever Depends() is used
        raise ConfigError(_INSTALL) from exc
    return Provider()


def wrap(handler: Callable[..., Any], provider: Any) -> Callable[..., Any]:
    """``handler`` with its ``Depends()`` parameters resolved on each call (overrides from ``provider``).

    Nothing is cast or validated by FastDepends: the handler's own arguments arrive as the
    pipeline bound them.
    """
    try:
        from fast_depends import inject
    except ImportError as exc:  # pragma: no cover - see new_provider
        raise ConfigError(_INSTALL) from exc
    wrapped: Callable[..., Any] = inject(
        handler, cast=False, cast_result=False, serializer_cls=None, dependency_provider=provider
    )
    return wrapped
