"""Validation of portable attributes (``str -> str``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.errors import InvalidAttributes

__all__ = ["validate_attributes"]


def validate_attributes(attributes: Any) -> None:
    """Raise :class:`~broker.errors.InvalidAttributes` unless ``attributes`` maps ``str`` to ``str``.

    ``None`` counts as no attributes.
    """
    if attributes is None:
        return
    if type(attributes) is dict:  # the common case, checked with exact types; anything odd goes on
        for name, value in attributes.items():
            if type(name) is not str or not name or type(value) is not str:
                break
        else:
            return
    if not isinstance(attributes, Mapping):
        raise InvalidAttributes(
            f"attributes must be a mapping of str to str, got {type(attributes).__name__}"
        )
    for name, value in attributes.items():
        if not isinstance(name, str) or not name:
            raise InvalidAttributes(f"attribute names must be non-empty str, got {name!r}")
        if not isinstance(value, str):
            raise InvalidAttributes(
                f"attribute {name!r} must be a str, got {type(value).__name__} ({value!r}); "
                "portable attributes are str -> str"
            )
