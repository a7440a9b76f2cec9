"""BackendBase.close: every resource it handed out is closed before the connection, whatever fails."""

from __future__ import annotations

import asyncio

import pytest

from broker.driver.base import BackendBase
from broker.errors import ClosedError


class _Recording(BackendBase):
    """A backend whose connection close writes down what was still open at that moment."""

    def __init__(self) -> None:
        super().__init__()
        self.events: list[str] = []
        self.open_at_connection_close: list[str] | None = None
        self.handed_out: list[_Resource] = []

    async def _close_connection(self) -> None:
        self.open_at_connection_close = [r.name for r in self.handed_out if not r.closed]
        self.events.append("connection")


class _Resource:
    """A consumer or publisher whose close takes a while (and may fail)."""

    def __init__(self, backend: _Recording, name: str, delay: float, fail: bool = False) -> None:
        self.backend, self.name, self.delay, self.fail = backend, name, delay, fail
        self.closed = False

    async def close(self) -> None:
        await asyncio.sleep(self.delay)
        self.closed = True
        self.backend.events.append(self.name)
        if self.fail:
            raise RuntimeError(f"{self.name} failed to close")


def _backend(*specs: tuple[str, float, bool]) -> _Recording:
    backend = _Recording()
    backend.handed_out = [
        backend._track(_Resource(backend, name, delay, fail)) for name, delay, fail in specs
    ]
    return backend


async def test_the_connection_closes_after_every_resource() -> None:
    backend = _backend(("consumer", 0.05, False), ("tracker", 0.02, False), ("publisher", 0.0, False))
    await backend.close()
    assert backend.open_at_connection_close == []
    assert backend.events[-1] == "connection"
    assert sorted(backend.events[:-1]) == ["consumer", "publisher", "tracker"]


async def test_a_failing_resource_does_not_keep_the_connection_open() -> None:
    backend = _backend(("consumer", 0.02, True), ("publisher", 0.05, False))
    with pytest.raises(RuntimeError, match="consumer failed to close"):
        await backend.close()
    assert backend.open_at_connection_close == []
    assert backend.events[-1] == "connection"


async def test_close_is_idempotent_and_refuses_new_resources() -> None:
    backend = _backend(("consumer", 0.0, False))
    await backend.close()
    await backend.close()
    assert backend.events.count("connection") == 1
    with pytest.raises(ClosedError):
        backend._track(object())
