"""What a consumer and a reader share: a client object created in the background, with its receiving thread.

The Pulsar client creates consumers and readers asynchronously. A :class:`ClientHandle` asks for
its object as soon as it is made inside a running event loop (else on first use), hands it out
once the client delivered it (starting the receiving thread), and closes it - waiting at most
:data:`CLOSE_TIMEOUT` for each step, so closing never hangs.
"""

from __future__ import annotations

import abc
import asyncio
import logging
from collections.abc import Callable
from typing import Any, Final

from broker.backends.pulsar.callbacks import error_or_value, outcome, wait
from broker.backends.pulsar.fetcher import Fetcher
from broker.errors import BrokerError, ClosedError, ReceiveError

__all__ = ["CLOSE_TIMEOUT", "ClientHandle", "log"]

log = logging.getLogger("broker.backends.pulsar")

#: Seconds closing a consumer may take before it is abandoned (closing never hangs).
CLOSE_TIMEOUT: Final = 5.0


class ClientHandle(abc.ABC):
    """A consumer or reader of the client: created in the background, opened on demand, closed once.

    ``kind`` names the object in messages (``"consumer"``, ``"reader"``), ``label`` what it reads,
    ``creating`` how its creation is described in errors.
    """

    #: The receiving thread (a subclass makes it; opening starts it).
    fetcher: Fetcher

    def __init__(self, kind: str, label: str, creating: str) -> None:
        self._kind = kind
        self._label = label
        self._creating = creating
        self._future: asyncio.Future[Any] | None = None
        #: The client object, once created (None before).
        self.handle: Any = None
        #: True once closed.
        self.closed = False

    @abc.abstractmethod
    def _request(self, done: Callable[[Any], None]) -> None:
        """Ask the client for the object; it calls ``done`` with the object or the failure."""

    def _starts_fetcher(self) -> bool:
        """Whether opening starts the receiving thread."""
        return True

    def _create_soon(self) -> None:
        """Ask for the object now when an event loop runs (else :meth:`open` does)."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # made outside a loop: create on first use
            return
        self._create(loop)

    def _create(self, loop: asyncio.AbstractEventLoop) -> None:
        future: asyncio.Future[Any] = loop.create_future()
        self._request(error_or_value(future))
        self._future = future

    def _closed_error(self) -> ClosedError:
        return ClosedError(f"the {self._kind} of {self._label} is closed")

    async def open(self, timeout: float | None = None) -> Any:
        """The client object, creating it first if needed."""
        handle = self.handle
        if handle is not None:
            return handle
        if self.closed:
            raise self._closed_error()
        loop = asyncio.get_running_loop()
        if self._future is None:
            self._create(loop)
        assert self._future is not None
        handle = await wait(asyncio.shield(self._future), self._creating, ReceiveError, timeout)
        if self.closed:
            raise self._closed_error()
        if self.handle is None:
            self.handle = handle
            if self._starts_fetcher():
                self.fetcher.start(loop)
        return handle

    async def close(self) -> None:
        """Close the client object; waits at most :data:`CLOSE_TIMEOUT` per step. Idempotent."""
        if self.closed:
            return
        self.closed = True
        self.fetcher.close()
        handle = self.handle
        if handle is None and self._future is not None:
            try:
                handle = await wait(asyncio.shield(self._future), self._creating, ReceiveError, CLOSE_TIMEOUT)
            except (BrokerError, TimeoutError):
                handle = None
        if handle is None:
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        handle.close_async(outcome(future))
        what = f"the {self._kind} of {self._label}"
        try:
            await wait(future, f"closing {what}", ReceiveError, CLOSE_TIMEOUT)
        except (BrokerError, TimeoutError) as exc:
            log.warning("closing %s: %s", what, exc)
