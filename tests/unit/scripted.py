"""Scripted sources for unit-testing the adapters: they replay a script of items and errors.

These stand in for a broker only where the adapters' own logic is under test; every broker
behaviour is tested against the in-memory broker and the real servers.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

from broker.errors import ClosedError, Timeout
from broker.message import Message


class RecordingAcker:
    """Records every settlement."""

    def __init__(self) -> None:
        self.acked: list[str] = []
        self.nacked: list[tuple[str, float | None]] = []

    async def ack(self, message: Message) -> None:
        self.acked.append(message.id)

    async def nack(self, message: Message, delay: float | None) -> None:
        self.nacked.append((message.id, delay))

    async def in_progress(self, message: Message) -> None:
        pass


class ScriptedIterator:
    """A MessageIterator fed through ``feed()``: Messages, exceptions, or ``None`` (= close)."""

    def __init__(self) -> None:
        self.acker = RecordingAcker()
        self.queue: asyncio.Queue[Any] = asyncio.Queue()
        self.closed = False
        self.pulls = 0

    def message(self, ident: str | int) -> Message:
        return Message(str(ident), str(ident).encode(), acker=self.acker)

    def feed(self, *items: Any) -> None:
        for item in items:
            self.queue.put_nowait(self.message(item) if isinstance(item, int | str) else item)

    async def next_message(self, timeout: float | None = None) -> Message:
        if self.closed:
            raise ClosedError("closed")
        self.pulls += 1
        try:
            async with asyncio.timeout(timeout):
                item = await self.queue.get()
        except TimeoutError:
            raise Timeout("scripted timeout") from None
        if item is None:
            self.closed = True
            raise ClosedError("closed by the script")
        if isinstance(item, BaseException):
            raise item
        return item  # type: ignore[no-any-return]

    async def next_batch(self, timeout: float | None = None) -> list[Message]:
        batch = [await self.next_message(timeout)]
        while not self.queue.empty() and self.queue._queue[0] is not None:  # type: ignore[attr-defined]
            if isinstance(self.queue._queue[0], BaseException):  # type: ignore[attr-defined]
                break
            batch.append(await self.next_message(0))
        return batch

    def __aiter__(self) -> AsyncIterator[Message]:
        return self._iterate()

    async def _iterate(self) -> AsyncIterator[Message]:
        while True:
            try:
                yield await self.next_message()
            except ClosedError:
                return

    async def close(self) -> None:
        self.closed = True

    async def __aenter__(self) -> ScriptedIterator:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()
