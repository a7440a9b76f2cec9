"""A view: a read-only, materialized copy of a whole table, kept up to date.

``run()`` opens one local store per partition of the table topic, recovers every partition
(from the store's offset when the storage is persistent), switches to *running* and then
follows the topic forever. With ``auto_reconnect=True`` a broker error sends the view back to
*connecting* and it retries with exponential backoff instead of stopping; its data stays
readable meanwhile. ``get``/``has``/``iterate`` read the local stores (readable from
*connecting* on; before that they raise :class:`TableNotReady`). ``iterate`` returns a
:class:`ViewIterator`, which can :meth:`~ViewIterator.seek` to a key (goka's ``Iterator.Seek``).

A view runs once by default: ``run()`` on a view that ran already raises :class:`ClosedError`.
With ``restartable=True`` (goka's old ``WithViewRestartable``), ``stop()`` or a failure leaves
the local stores open and readable, and ``run()`` may be called again: it catches up from where
the stores are instead of recovering from scratch. :meth:`View.close` releases the stores.
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any, Self

from broker import Backoff
from broker.backends.kafka.processor.codecs import resolve_codec
from broker.backends.kafka.processor.defaults import resolve_view_storage
from broker.backends.kafka.processor.errors import TableNotReady
from broker.backends.kafka.processor.settings import RetryDelay, resolve_partitioner
from broker.backends.kafka.processor.stats import ViewStats, table_stats
from broker.backends.kafka.processor.storage import Storage, StorageBuilder
from broker.backends.kafka.processor.table import (
    KeyPlacement,
    PartitionTable,
    TableFollower,
    TableStatus,
    UpdateCallback,
    default_update,
    mark_running,
    partitioner_name,
    recover,
)
from broker.codecs import Codec
from broker.driver.partitioning import Partitioner
from broker.driver.resources import stop_task
from broker.errors import ClosedError, ConfigError
from broker.log import Log, with_client_id

__all__ = ["StateCallback", "StateChanges", "View", "ViewIterator", "ViewState"]

log = logging.getLogger("broker.backends.kafka.processor")


class ViewState(enum.IntEnum):
    """The life of a view (ordered)."""

    IDLE = 0
    INITIALIZING = 1
    CONNECTING = 2
    CATCHUP = 3
    RUNNING = 4


#: Called with the new state on every state change (plain or coroutine function).
StateCallback = Callable[[ViewState], Awaitable[None] | None]


class ViewIterator(Iterator[tuple[str, Any]]):
    """``(key, decoded value)`` pairs of every partition of a view, in key order.

    A plain iterator (``for key, value in view.iterate(): ...``) that can also
    :meth:`seek`, like goka's ``Iterator``. It reads the stores lazily, so it sees writes made
    while it is iterated wherever the storage does (the memory storage snapshots a range when
    it is opened, and again on every seek).
    """

    def __init__(
        self,
        storages: Sequence[Storage],
        decode: Callable[[bytes], Any],
        start: str | None = None,
        limit: str | None = None,
        prefix: str | None = None,
    ) -> None:
        self._storages = list(storages)
        self._decode = decode
        self.start = start
        self.limit = limit
        self.prefix = prefix
        self._head: tuple[str, bytes] | None = None
        self._released = False
        self._merged = self._open(start)

    def __repr__(self) -> str:
        return f"<ViewIterator [{self.start!r}, {self.limit!r}) prefix={self.prefix!r}>"

    def _open(self, start: str | None) -> Iterator[tuple[str, bytes]]:
        limit, prefix = self.limit, self.prefix
        return heapq.merge(*(s.iterate(start, limit, prefix=prefix) for s in self._storages))

    def __iter__(self) -> Self:
        return self

    def __next__(self) -> tuple[str, Any]:
        if self._released:
            raise StopIteration
        head = self._head
        if head is not None:
            self._head = None
            key, data = head
        else:
            key, data = next(self._merged)
        return key, self._decode(data)

    def seek(self, key: str) -> bool:
        """Move to the first pair whose key is ``>= key`` (inside the iterator's range).

        Returns whether there is such a pair; the next ``next()`` returns it. Seeking backwards
        works too. A released iterator raises :class:`ClosedError`.
        """
        if self._released:
            raise ClosedError("the view iterator was released")
        start = key if self.start is None or key > self.start else self.start
        self._merged = self._open(start)
        self._head = next(self._merged, None)
        return self._head is not None

    def release(self) -> None:
        """Stop iterating: ``next()`` ends the iteration and :meth:`seek` raises (idempotent)."""
        self._released = True
        self._head = None
        self._merged = iter(())


class StateChanges:
    """An async iterator of a view's states from now on; ``stop()`` ends it (see ``View.state_changes``)."""

    def __init__(self, view: View) -> None:
        self._queue: asyncio.Queue[ViewState | None] = asyncio.Queue()
        self._stopped = False
        self._stop = view.observe(self._queue.put_nowait)

    def __aiter__(self) -> StateChanges:
        return self

    async def __anext__(self) -> ViewState:
        if self._stopped and self._queue.empty():
            raise StopAsyncIteration
        state = await self._queue.get()
        if state is None:
            raise StopAsyncIteration
        return state

    def stop(self) -> None:
        """Stop observing; the iteration ends after the states already queued (idempotent)."""
        if not self._stopped:
            self._stopped = True
            self._stop()
            self._queue.put_nowait(None)

    def __enter__(self) -> StateChanges:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.stop()


class View:
    """A materialized table: ``async with View(log, "user-clicks-table", "int64") as view: ...``."""

    def __init__(
        self,
        log_port: Log,
        table: str,
        codec: Codec[Any] | str,
        *,
        storage: StorageBuilder | None = None,
        partitioner: str | Partitioner = "murmur2",
        update_callback: UpdateCallback = default_update,
        auto_reconnect: bool = False,
        backoff: tuple[float, float] | RetryDelay = (0.5, 30.0),
        poll_timeout: float = 0.2,
        on_state_change: StateCallback | None = None,
        restartable: bool = False,
        client_id: str | None = None,
        logger: logging.Logger | None = None,
        backoff_reset: float = 60.0,
    ) -> None:
        if not table:
            raise ConfigError("a view needs a table topic name")
        if logger is not None and not isinstance(logger, logging.Logger):
            raise ConfigError(f"logger must be a logging.Logger or None, got {logger!r}")
        #: goka's ``WithViewLogger``: where this view logs (default: the module's logger).
        self._logger: logging.Logger = logger or log
        #: The client id its readers report to the broker (``None``: the log's own).
        self.client_id = client_id
        self._log = with_client_id(log_port, client_id)
        self.topic = table
        self.codec = resolve_codec(codec, f"view({table!r})")
        #: ``storage``, or the default: on Kafka LMDB under ``<data dir>/view`` (goka's
        #: ``DefaultViewStoragePath``; memory for a partition another process holds), else memory.
        self._build = resolve_view_storage(storage, log_port)
        self._partitioner = resolve_partitioner(partitioner)
        self._partitioner_name = partitioner_name(partitioner)
        self._update = update_callback
        self.auto_reconnect = auto_reconnect
        #: ``run()`` may be called again after it returned (the stores stay open until ``close()``).
        self.restartable = restartable
        self._released = False
        #: Waits between reconnects in a row: ``(first, most)`` doubles, or any :class:`RetryDelay`
        #: (goka's ``WithViewBackoffBuilder``); the count restarts once records flow again.
        self.backoff: RetryDelay = (
            Backoff(initial=backoff[0], multiplier=2.0, maximum=backoff[1])
            if isinstance(backoff, tuple)
            else backoff
        )
        self._poll_timeout = poll_timeout
        if not backoff_reset >= 0:
            raise ConfigError(f"backoff_reset must be >= 0 seconds, got {backoff_reset}")
        #: A reconnect after this many seconds without a failure starts the backoff from its first
        #: delay again (goka's ``WithViewBackoffResetTimeout``; records flowing again do too).
        self.backoff_reset = backoff_reset
        self._callbacks: list[StateCallback] = [on_state_change] if on_state_change else []
        self._tables: list[PartitionTable] = []
        self._follower: TableFollower | None = None
        self._recovered_once = asyncio.Event()
        self._caught_up = False
        self._state = ViewState.IDLE
        self._changed = asyncio.Event()
        self._stopping = False
        self._closed = False
        self._task: asyncio.Task[None] | None = None
        self._ran = False

    def __repr__(self) -> str:
        return f"<View {self.topic!r} {self._state.name.lower()}>"

    # -- state ----------------------------------------------------------------------------
    @property
    def state(self) -> ViewState:
        """The current state."""
        return self._state

    @property
    def recovered(self) -> bool:
        """True once every partition was recovered (stays true while reconnecting)."""
        return self._recovered_once.is_set()

    def observe(self, callback: StateCallback) -> Callable[[], None]:
        """Call ``callback(state)`` on every state change from now on.

        Returns a function that stops it (goka's ``StateChangeObserver.Stop``; idempotent).
        """
        self._callbacks.append(callback)

        def stop() -> None:
            self.unobserve(callback)

        return stop

    def unobserve(self, callback: StateCallback) -> None:
        """Stop calling ``callback`` on state changes (no error if it was not observing)."""
        with contextlib.suppress(ValueError):
            self._callbacks.remove(callback)

    def state_changes(self) -> StateChanges:
        """The view's state changes as an async iterator (goka's ``ObserveStateChanges``).

        ``async for state in view.state_changes(): ...``; ``stop()`` on it (or leaving
        ``with``) ends the iteration and stops observing. Unlike goka's channel, a reader that
        falls behind never blocks the view: changes queue up until read.
        """
        return StateChanges(self)

    async def _set_state(self, state: ViewState) -> None:
        if state == self._state:
            return
        self._state = state
        self._changed.set()
        self._changed = asyncio.Event()
        for callback in list(self._callbacks):
            result = callback(state)
            if inspect.isawaitable(result):
                await result

    async def wait_state(self, state: ViewState, timeout: float | None = None) -> None:
        """Wait until the view reaches ``state`` (or a later one); ``TimeoutError`` after ``timeout``."""
        async with asyncio.timeout(timeout):
            while self._state < state:
                if self._task is not None and self._task.done():
                    self._task.result()
                    raise ClosedError(f"view of {self.topic!r} stopped before reaching {state.name}")
                waiter = asyncio.ensure_future(self._changed.wait())
                pending: set[asyncio.Future[Any]] = {waiter}
                if self._task is not None:
                    pending.add(self._task)
                try:
                    await asyncio.wait(pending, return_when=asyncio.FIRST_COMPLETED)
                finally:
                    waiter.cancel()

    async def wait_running(self, timeout: float | None = None) -> None:
        """Wait until every partition was recovered and the view follows the table."""
        await self.wait_state(ViewState.RUNNING, timeout)

    # -- running --------------------------------------------------------------------------
    async def _setup(self) -> None:
        await self._set_state(ViewState.INITIALIZING)
        count = await self._log.partitions(self.topic)
        if not self._tables:
            self._tables = [
                PartitionTable(self.topic, p, self._build(self.topic, p), self._update) for p in range(count)
            ]
        await self._set_state(ViewState.CONNECTING)

    async def _recover(self) -> None:
        await self._set_state(ViewState.CATCHUP)
        placement = KeyPlacement(self._partitioner, self._partitioner_name, len(self._tables))
        await recover(
            self._log, self._tables, placement=placement, owner=f"view {self.topic!r}", logger=self._logger
        )
        mark_running(self._tables)
        self._follower = TableFollower(self._log)
        self._follower.add(self._tables)
        self._caught_up = True
        self._recovered_once.set()
        await self._set_state(ViewState.RUNNING)

    async def _step(self, timeout: float | None) -> int:
        """Recover if needed, then apply what arrives within ``timeout`` (the tester drives this)."""
        if not self._tables:
            await self._setup()
        if not self._caught_up:
            await self._recover()
        assert self._follower is not None
        return await self._follower.step(timeout)

    async def run(self) -> None:
        """Recover, then follow the table until ``stop()`` or cancellation.

        Raises :class:`ClosedError` if the view ran before and is not ``restartable``, or was
        closed. A restartable view keeps its stores open when this returns or raises, and the
        next ``run()`` catches up from them.
        """
        if self._ran and not self.restartable:
            raise ClosedError("a view runs only once; create a new one (or pass restartable=True)")
        if self._released:
            raise ClosedError(f"view of {self.topic!r} is closed")
        if self._ran:
            self._stopping = False
            if self._tables:
                await self._set_state(ViewState.CONNECTING)
        self._ran = True
        failures = 0
        loop = asyncio.get_running_loop()
        healthy_since = loop.time()
        try:
            while not self._stopping:
                try:
                    count = await self._step(self._poll_timeout)
                    if count:
                        failures = 0
                except (ClosedError, ConfigError):
                    raise
                except Exception as exc:
                    if not self.auto_reconnect:
                        raise
                    if loop.time() - healthy_since >= self.backoff_reset:
                        failures = 0  # ran long enough since the last failure: start afresh
                    healthy_since = loop.time()
                    failures += 1
                    delay = max(0.0, float(self.backoff.delay(failures)))
                    self._logger.warning(
                        "view of %r lost the broker (%s); reconnecting in %.1fs", self.topic, exc, delay
                    )
                    await self._reset()
                    await asyncio.sleep(delay)
        finally:
            if self.restartable and not self._released:
                await self._pause()
            else:
                await self._shutdown()

    async def _stop_following(self) -> None:
        self._caught_up = False
        if self._follower is not None:
            with contextlib.suppress(Exception):
                await self._follower.close()
            self._follower = None

    async def _pause(self) -> None:
        """A restartable view's run ended: stop following, keep the stores open and readable."""
        await self._stop_following()
        for table in self._tables:
            with contextlib.suppress(Exception):
                table.storage.flush()
            table.status = TableStatus.STOPPED
        await self._set_state(ViewState.IDLE)

    async def _reset(self) -> None:
        await self._stop_following()
        await self._set_state(ViewState.CONNECTING if self._tables else ViewState.IDLE)

    async def _shutdown(self) -> None:
        self._closed = True
        self._released = True
        if self._follower is not None:
            with contextlib.suppress(Exception):
                await self._follower.close()
            self._follower = None
        for table in self._tables:
            with contextlib.suppress(Exception):
                table.storage.flush()
            table.storage.close()
            table.status = TableStatus.STOPPED
        await self._set_state(ViewState.IDLE)

    def start(self) -> asyncio.Task[None]:
        """Run the view in a background task (a restartable view's ended run is started again)."""
        if self._task is None or (self.restartable and self._task.done() and not self._released):
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"view-{self.topic}")
        return self._task

    async def stop(self) -> None:
        """Stop following the table (idempotent); closes the stores unless ``restartable``."""
        self._stopping = True
        task = self._task
        if task is not None and not task.done():
            await stop_task(task)
        elif task is None and self._tables and not self.restartable:
            await self._shutdown()

    async def close(self) -> None:
        """Stop and close the stores; the view cannot run again (idempotent)."""
        await self.stop()
        if not self._closed and (self._tables or self.restartable):
            await self._shutdown()
        self._released = True

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    # -- reading --------------------------------------------------------------------------
    def _check_readable(self) -> None:
        if self._closed:
            raise ClosedError(f"view of {self.topic!r} is stopped")
        if self._state < ViewState.CONNECTING and not self._recovered_once.is_set():
            raise TableNotReady(f"view of {self.topic!r} is {self._state.name.lower()}; wait_running() first")

    def partition_of(self, key: str) -> int:
        """The partition ``key`` belongs to."""
        self._check_readable()
        return self._partitioner(key.encode(), len(self._tables))

    def get(self, key: str) -> Any:
        """The value of ``key`` (``None`` if absent)."""
        self._check_readable()
        data = self._tables[self._partitioner(key.encode(), len(self._tables))].storage.get(key)
        return None if data is None else self.codec.decode(data)

    def has(self, key: str) -> bool:
        """True if ``key`` has a value."""
        self._check_readable()
        return self._tables[self._partitioner(key.encode(), len(self._tables))].storage.has(key)

    def iterate(
        self, start: str | None = None, limit: str | None = None, *, prefix: str | None = None
    ) -> ViewIterator:
        """``(key, value)`` pairs of all partitions in key order, in ``[start, limit)``.

        The :class:`ViewIterator` returned can also :meth:`~ViewIterator.seek` to a key.
        """
        self._check_readable()
        return ViewIterator([t.storage for t in self._tables], self.codec.decode, start, limit, prefix)

    def evict(self, key: str) -> None:
        """Remove ``key`` from the local copy only (the table topic keeps it)."""
        self._check_readable()
        self._tables[self._partitioner(key.encode(), len(self._tables))].storage.delete(key)

    def stats(self) -> ViewStats:
        """Status and recovery progress per partition."""
        return ViewStats({t.partition: table_stats(t) for t in self._tables})
