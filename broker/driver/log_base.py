"""``LogBase``: what the :class:`~broker.log.Log` implementations (Kafka, in-memory) share.

``async with`` support, the closed check every call makes first, the checks of a record every
``send`` makes before writing it (:meth:`LogBase._check_send`), the consumers and readers a log
made (:meth:`LogBase._adopt`) and ``close``, which closes them before the log's own
:meth:`LogBase._release`. ``produce`` is ``send`` awaited, inherited from the
:class:`~broker.log.Log` port. ``send`` itself stays in each log's own module: the Kafka queue's
ack path counts the log as one hop.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from typing import ClassVar, TypeVar

from broker.driver.attributes import validate_attributes
from broker.driver.resources import AsyncResource
from broker.errors import ClosedError, InvalidMessage
from broker.log import Log

__all__ = ["LogBase"]

_Child = TypeVar("_Child", bound=AsyncResource)


class LogBase(AsyncResource, Log):
    """Base of a :class:`~broker.log.Log`: subclasses implement the port but ``produce``."""

    #: The message of the ``ClosedError`` raised by calls made after ``close()``.
    closed_message: ClassVar[str] = "the log is closed"
    #: Set by ``close()``.
    _closed: bool = False
    #: The consumers and readers made here (:meth:`_adopt`); a subclass sets it up in ``__init__``.
    _children: list[AsyncResource]

    def _check(self) -> None:
        """Raise ``ClosedError`` once the log is closed."""
        if self._closed:
            raise ClosedError(self.closed_message)

    def _check_send(self, value: object, key: object, attributes: Mapping[str, str] | None) -> None:
        """What a log's ``send`` checks before it writes anything: the log is open (else
        ``ClosedError``), the value is bytes or None and the key str or None (else
        ``InvalidMessage``), the attributes are ``str -> str`` (else ``TypeError``)."""
        self._check()
        if value is not None and not isinstance(value, bytes | bytearray | memoryview):
            raise InvalidMessage(f"a record value must be bytes or None, got {type(value).__name__}")
        if key is not None and not isinstance(key, str):
            raise InvalidMessage(f"a record key must be str or None, got {type(key).__name__}")
        if attributes:
            validate_attributes(attributes)

    def _adopt(self, child: _Child) -> _Child:
        """Keep ``child`` (a consumer or reader made by this log) for ``close`` to close; return it."""
        self._children.append(child)
        return child

    async def close(self) -> None:
        """Close every consumer and reader made here, then what the log itself holds (``_release``)."""
        if self._closed:
            return
        self._closed = True
        children, self._children = self._children, []
        await asyncio.gather(*(child.close() for child in children), return_exceptions=True)
        await self._release()

    async def _release(self) -> None:
        """Close what the log holds besides its consumers and readers (nothing, by default)."""
