"""Completion callbacks of the Pulsar client, resolved into asyncio futures.

The client calls back on its own IO threads; every callback here only hands its outcome to the
event loop with ``call_soon_threadsafe``, so nothing the client does ever blocks the loop.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from typing import Any

import _pulsar  # type: ignore[import-not-found]

from broker.backends.pulsar.errors import translate
from broker.errors import BrokerError, Timeout

__all__ = ["error_or_value", "outcome", "settle", "wait"]

_OK = _pulsar.Result.Ok


def settle(future: asyncio.Future[Any], failure: Any, value: Any) -> None:
    """From any thread: fail ``future`` with ``failure`` (a raw client failure) or give it ``value``."""
    loop = future.get_loop()
    with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
        loop.call_soon_threadsafe(_settle, future, failure, value)


def _settle(future: asyncio.Future[Any], failure: Any, value: Any) -> None:
    if future.done():
        return
    if failure is None:
        future.set_result(value)
    else:
        future.set_exception(_Failure(failure))


class _Failure(Exception):
    """Carries a raw client failure from a callback to :func:`wait`."""

    def __init__(self, failure: Any) -> None:
        super().__init__(failure)
        self.failure = failure


def outcome(future: asyncio.Future[Any], value: Any = None) -> Callable[..., None]:
    """A ``(result, *rest)`` callback settling ``future`` with ``value`` (or the 2nd argument)."""

    def callback(result: Any, *rest: Any) -> None:
        if result == _OK:
            settle(future, None, rest[0] if rest and value is None else value)
        else:
            settle(future, result, None)

    return callback


def error_or_value(future: asyncio.Future[Any]) -> Callable[[Any], None]:
    """A callback taking an ``Error`` or a value (the ``*_async_v2`` style), settling ``future``."""

    def callback(value: Any) -> None:
        if isinstance(value, _pulsar.Error):
            settle(future, value, None)
        else:
            settle(future, None, value)

    return callback


async def wait(
    future: asyncio.Future[Any], doing: str, default: type[BrokerError], timeout: float | None = None
) -> Any:
    """Await ``future``; a client failure is raised as a broker error (``default`` when none fits better).

    Cancelling the caller leaves the client operation running; its outcome is then dropped.
    """
    try:
        if timeout is None:
            return await future
        async with asyncio.timeout(timeout):
            return await future
    except _Failure as exc:
        raise translate(exc.failure, doing, default) from None
    except TimeoutError as exc:
        if isinstance(exc, BrokerError):
            raise
        raise Timeout(f"{doing} took longer than {timeout}s") from None
