"""``LogBase``: what the :class:`~broker.log.Log` implementations (Kafka, in-memory) share.

``async with`` support, the closed check every call makes first, and ``produce``, which is
``send`` awaited: a log implements ``send`` (queue one record, resolve its position later) and
gets the waiting variant from here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from broker.errors import ClosedError
from broker.log import Log, TopicPartition
from broker.resources import AsyncResource

__all__ = ["LogBase"]


class LogBase(AsyncResource):
    """Base of a :class:`~broker.log.Log`: subclasses implement everything but ``produce``."""

    #: The message of the ``ClosedError`` raised by calls made after ``close()``.
    closed_message: ClassVar[str] = "the log is closed"
    #: Set by ``close()``.
    _closed: bool = False

    def _check(self) -> None:
        """Raise ``ClosedError`` once the log is closed."""
        if self._closed:
            raise ClosedError(self.closed_message)

    async def produce(
        self: Log,
        topic: str,
        value: bytes | None,
        *,
        key: str | None = None,
        partition: int | None = None,
        attributes: Mapping[str, str] | None = None,
        client_id: str | None = None,
    ) -> tuple[TopicPartition, int]:
        """Write one record and wait until the log has it; returns ``(TopicPartition, offset)``.

        The same as awaiting what ``send`` returns (``client_id`` as ``send`` takes it).
        """
        return await self.send(
            topic, value, key=key, partition=partition, attributes=attributes, client_id=client_id
        )
