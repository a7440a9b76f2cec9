"""Optional dependencies: importing a backend's SDK only when it is used, naming the extra when it is missing.

``import broker`` works with no extra installed; a backend's registration calls
:func:`import_for_extra` when it opens a backend, so a missing SDK surfaces as
:class:`~broker.errors.MissingDependency` telling which extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

from broker.errors import MissingDependency

__all__ = ["import_for_extra"]


def import_for_extra(extra: str, module: str, *, named: str | None = None) -> ModuleType:
    """The module ``module``, or :class:`~broker.errors.MissingDependency` naming ``extra`` when it fails.

    The error names ``named`` as the missing package (default: ``module``), with the original
    ``ImportError`` chained.
    """
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(extra, named or module) from exc
