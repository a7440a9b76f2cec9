"""Virtual time for tests on ``inmem://``: time advances only when every task is waiting.

Inside :func:`virtual_time` the running event loop's clock is virtual. When no callback is ready
and the loop would sleep until its next timer, it does not sleep: the virtual time jumps to that
timer. So ``await asyncio.sleep(30)``, a 30 s ack deadline, a delayed nack, retry backoff and a
batch window all pass at once in wall time, in the order and at the virtual times they would
have happened, and :data:`broker.driver.clock.clock` reads the same virtual time (deadlines, publish
times). Ready I/O is still polled first, so a loop that also serves sockets keeps serving them.

This is the approach of ``looptime`` (PyPI), done on the running loop instance for one block
rather than on every loop of a test session, so a test that does not ask for it runs untouched.

Virtual time is for the in-memory backend only: an SDK's own threads (librdkafka, pulsar-client,
executor threads) and a real broker's server keep real time, and a deadline that jumps ahead of
them would fail tests for no reason. :func:`virtual_time` refuses a real broker URL with
:class:`~broker.errors.ConfigError`; the pytest plugin skips a ``polybroker_virtual_time`` test
when it runs against a real broker.
"""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from broker.driver.clock import follow_loop
from broker.errors import ConfigError

__all__ = ["VirtualTime", "check_virtual_time_url", "virtual_time"]

_ATTRIBUTE = "_polybroker_virtual_time"


def check_virtual_time_url(url: str | None) -> None:
    """Raise ``ConfigError`` unless ``url`` is None or ``inmem://...`` (virtual time is in-memory only)."""
    if url is not None and not url.startswith("inmem:"):
        raise ConfigError(
            f"virtual time works with inmem:// only, not {url.split('://', 1)[0]}://: a real broker and its "
            "SDK's threads keep real time, so deadlines would pass before the broker could act"
        )


class VirtualTime:
    """The virtual clock of one event loop while :func:`virtual_time` runs.

    :attr:`now` is the loop's time (``loop.time()``); :meth:`elapsed` the virtual seconds since the
    block began, the figure a test asserts on (a redelivery 30 s after the publish).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        if not isinstance(loop, asyncio.BaseEventLoop) or not isinstance(
            getattr(loop, "_selector", None), selectors.BaseSelector
        ):
            raise ConfigError(
                f"virtual time needs asyncio's selector event loop, not {type(loop).__name__} (uvloop and "
                "the proactor loop schedule timers outside Python)"
            )
        self._loop = loop
        #: The loop time when virtual time began; it continues from the real loop time.
        self.start: float = loop.time()
        self._now = self.start
        self._real_time: Callable[[], float] = type(loop).time.__get__(loop)
        selector: selectors.BaseSelector = loop._selector  # type: ignore[attr-defined]
        self._selector = selector
        self._real_select: Callable[..., Any] = selector.select
        #: How many times the clock jumped ahead (every task was waiting for a timer).
        self.jumps = 0

    @property
    def now(self) -> float:
        """The loop's virtual time."""
        return self._now

    def elapsed(self) -> float:
        """Virtual seconds since virtual time began."""
        return self._now - self.start

    def _time(self) -> float:
        return self._now

    def _select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        if timeout is None or timeout <= 0:
            # Nothing scheduled (wait for I/O or another thread) or something ready: as usual.
            return self._real_select(timeout)  # type: ignore[no-any-return]
        events: list[tuple[selectors.SelectorKey, int]] = self._real_select(0)
        if not events:
            # Every task waits for a timer: jump to the first one instead of sleeping.
            self._now += timeout
            self.jumps += 1
        return events

    def _install(self) -> None:
        loop: Any = self._loop
        if getattr(loop, _ATTRIBUTE, None) is not None:
            raise RuntimeError("this event loop already runs in virtual time")
        setattr(loop, _ATTRIBUTE, self)
        loop.time = self._time
        self._selector.select = self._select  # type: ignore[method-assign]

    def _uninstall(self) -> None:
        loop: Any = self._loop
        self._selector.select = self._real_select  # type: ignore[method-assign]
        # Back to real time, continuing from the virtual time (the loop's clock never goes back,
        # and timers set in virtual time keep their distance).
        real_time = self._real_time
        offset = self._now - real_time()

        def continued() -> float:
            return real_time() + offset

        loop.time = continued
        setattr(loop, _ATTRIBUTE, None)


@contextmanager
def virtual_time(
    loop: asyncio.AbstractEventLoop | None = None, *, url: str | None = None
) -> Iterator[VirtualTime]:
    """Run the block with ``loop`` (default: the running loop) in virtual time.

    ``url``, when given, is the broker the block uses: anything but ``inmem://`` raises
    ``ConfigError``. Use inside a coroutine::

        with virtual_time() as vt:
            await asyncio.sleep(30)
            assert round(vt.elapsed(), 6) == 30
    """
    check_virtual_time_url(url)
    target = loop if loop is not None else asyncio.get_running_loop()
    state = VirtualTime(target)
    state._install()
    try:
        with follow_loop(target):
            yield state
    finally:
        state._uninstall()
