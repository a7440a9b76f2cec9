"""Markers that bind a handler parameter to part of the delivery: its key and its attributes.

Used as ``Annotated`` metadata in a subscriber's signature::

    @app.subscriber("orders", "billing")
    async def handle(
        order: Order, key: Annotated[str | None, Key], attrs: Annotated[Mapping[str, str], Attributes]
    ) -> None: ...
"""

from __future__ import annotations

from typing import Final

__all__ = ["Attributes", "Key"]


class _Marker:
    """One of the parameter markers (compared by identity)."""

    __slots__ = ("name",)

    def __init__(self, name: str) -> None:
        self.name = name

    def __repr__(self) -> str:
        return f"broker.app.{self.name}"


#: ``Annotated[str | None, Key]``: the parameter receives the message's key (None when it has none).
Key: Final = _Marker("Key")
#: ``Annotated[Mapping[str, str], Attributes]``: the parameter receives the message's attributes.
Attributes: Final = _Marker("Attributes")
