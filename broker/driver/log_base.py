"""``LogBase``: what the :class:`~broker.log.Log` implementations (Kafka, in-memory) share.

``async with`` support, the closed check every call makes first, and ``produce``, which is
``send`` awaited: a log implements ``send`` (queue one record, resolve its position later) and
gets the waiting variant from the :class:`~broker.log.Log` port it derives from.
"""

from __future__ import annotations

from typing import ClassVar

from broker.driver.resources import AsyncResource
from broker.errors import ClosedError
from broker.log import Log

__all__ = ["LogBase"]


class LogBase(AsyncResource, Log):
    """Base of a :class:`~broker.log.Log`: subclasses implement everything but ``produce``."""

    #: The message of the ``ClosedError`` raised by calls made after ``close()``.
    closed_message: ClassVar[str] = "the log is closed"
    #: Set by ``close()``.
    _closed: bool = False

    def _check(self) -> None:
        """Raise ``ClosedError`` once the log is closed."""
        if self._closed:
            raise ClosedError(self.closed_message)
