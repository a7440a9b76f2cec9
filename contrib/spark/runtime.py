"""One asyncio event loop per process, on a daemon thread, for the synchronous Spark callbacks.

Spark calls data sources synchronously (``read``, ``write``, ``latestOffset``, ...) while the
backends are asyncio. Each Python process (driver runner, executor worker) gets one loop thread
the first time it needs one; :func:`run` submits a coroutine to it and waits. Spark forks its
workers from a daemon, so the loop is keyed by process id and made again after a fork.
"""

from __future__ import annotations

import asyncio
import os
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

__all__ = ["loop", "run"]

T = TypeVar("T")

_lock = threading.Lock()
_state: tuple[int, asyncio.AbstractEventLoop] | None = None


def _serve(event_loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
    asyncio.set_event_loop(event_loop)
    event_loop.call_soon(ready.set)
    event_loop.run_forever()


def loop() -> asyncio.AbstractEventLoop:
    """This process's background event loop (started on first use)."""
    global _state
    state = _state
    pid = os.getpid()
    if state is not None and state[0] == pid:
        return state[1]
    with _lock:
        state = _state
        if state is not None and state[0] == pid:
            return state[1]
        event_loop = asyncio.new_event_loop()
        ready = threading.Event()
        thread = threading.Thread(
            target=_serve, args=(event_loop, ready), name="polybroker-spark-loop", daemon=True
        )
        thread.start()
        ready.wait()
        _state = (pid, event_loop)
        return event_loop


def run(coro: Coroutine[Any, Any, T], timeout: float | None = None) -> T:
    """Run ``coro`` on the background loop and return its result (raise its exception)."""
    event_loop = loop()
    if threading.current_thread().name == "polybroker-spark-loop":
        coro.close()
        raise RuntimeError("broker.contrib.spark.runtime.run() called from its own event loop")
    future = asyncio.run_coroutine_threadsafe(coro, event_loop)
    try:
        return future.result(timeout)
    except BaseException:
        future.cancel()
        raise
