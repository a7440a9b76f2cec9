"""Read-only attributes a wrapper forwards from the object it wraps.

A wrapper (a blocking message around an async one, a processor context around its record, an
instrumented backend around the backend) shows many fields of what it wraps as they are. One
:class:`Forwarded` line per field says so, instead of a property per field::

    class SyncRecord:
        offset: Forwarded[int] = Forwarded("record", "The record's offset in its partition.")
"""

from __future__ import annotations

from operator import attrgetter
from typing import Any, Generic, Never, Self, TypeVar, overload

__all__ = ["Forwarded"]

V = TypeVar("V")


class Forwarded(Generic[V]):
    """A read-only attribute: ``wrapper.NAME`` is ``wrapper.<inner>.<field>`` (``field`` defaults to
    the attribute's own name), read on every access, so it follows the wrapped object."""

    def __init__(self, inner: str, doc: str, *, field: str | None = None) -> None:
        self.inner = inner
        self.field = field
        self.__doc__ = doc
        self._get: Any = None

    def __set_name__(self, owner: type, name: str) -> None:
        self.field = self.field or name
        self._get = attrgetter(f"{self.inner}.{self.field}")

    @overload
    def __get__(self, obj: None, owner: type | None = None) -> Self: ...

    @overload
    def __get__(self, obj: object, owner: type | None = None) -> V: ...

    def __get__(self, obj: object | None, owner: type | None = None) -> V | Self:
        if obj is None:
            return self
        value: V = self._get(obj)
        return value

    def __set__(self, obj: object, value: Never) -> None:
        raise AttributeError(f"{self.field!r} is read-only (it is the wrapped {self.inner}'s)")
