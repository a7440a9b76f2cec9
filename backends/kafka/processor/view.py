"""A view: a read-only, materialized copy of a whole table, kept up to date.

``run()`` opens one local store per partition of the table topic, recovers every partition
(from the store's offset when the storage is persistent), switches to *running* and then
follows the topic forever. With ``auto_reconnect=True`` a broker error sends the view back to
*connecting* and it retries with exponential backoff instead of stopping; its data stays
readable meanwhile. ``get``/``has``/``iterate`` read the local stores (readable from
*connecting* on; before that they raise :class:`TableNotReady`).
"""

from __future__ import annotations

import asyncio
import contextlib
import enum
import heapq
import inspect
import logging
from collections.abc import Awaitable, Callable, Iterator
from typing import Any, Self

from backends.kafka.processor.codecs import resolve_codec
from backends.kafka.processor.errors import TableNotReady
from backends.kafka.processor.options import resolve_partitioner
from backends.kafka.processor.stats import TableStats, ViewStats
from backends.kafka.processor.storage import StorageBuilder, memory_storage
from backends.kafka.processor.table import (
    KeyPlacement,
    PartitionTable,
    TableFollower,
    TableStatus,
    UpdateCallback,
    default_update,
    partitioner_name,
    recover,
)
from broker.codecs import Codec
from broker.errors import ClosedError, ConfigError
from broker.log import Log
from broker.partitioning import Partitioner

__all__ = ["StateCallback", "View", "ViewState"]

log = logging.getLogger("backends.kafka.processor")


class ViewState(enum.IntEnum):
    """The life of a view (ordered)."""

    IDLE = 0
    INITIALIZING = 1
    CONNECTING = 2
    CATCHUP = 3
    RUNNING = 4


#: Called with the new state on every state change (plain or coroutine function).
StateCallback = Callable[[ViewState], Awaitable[None] | None]


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
        backoff: tuple[float, float] = (0.5, 30.0),
        poll_timeout: float = 0.2,
        on_state_change: StateCallback | None = None,
    ) -> None:
        if not table:
            raise ConfigError("a view needs a table topic name")
        self._log = log_port
        self.topic = table
        self.codec = resolve_codec(codec, f"view({table!r})")
        self._build = storage or memory_storage()
        self._partitioner = resolve_partitioner(partitioner)
        self._partitioner_name = partitioner_name(partitioner)
        self._update = update_callback
        self.auto_reconnect = auto_reconnect
        self._backoff = backoff
        self._poll_timeout = poll_timeout
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

    def observe(self, callback: StateCallback) -> None:
        """Call ``callback(state)`` on every state change from now on."""
        self._callbacks.append(callback)

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
        await recover(self._log, self._tables, placement=placement, owner=f"view {self.topic!r}")
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
        """Recover, then follow the table until ``stop()`` or cancellation."""
        if self._ran:
            raise ClosedError("a view runs only once; create a new one")
        self._ran = True
        delay = self._backoff[0]
        try:
            while not self._stopping:
                try:
                    count = await self._step(self._poll_timeout)
                    if count:
                        delay = self._backoff[0]
                except (ClosedError, ConfigError):
                    raise
                except Exception as exc:
                    if not self.auto_reconnect:
                        raise
                    log.warning(
                        "view of %r lost the broker (%s); reconnecting in %.1fs", self.topic, exc, delay
                    )
                    await self._reset()
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, self._backoff[1])
        finally:
            await self._shutdown()

    async def _reset(self) -> None:
        self._caught_up = False
        if self._follower is not None:
            with contextlib.suppress(Exception):
                await self._follower.close()
            self._follower = None
        await self._set_state(ViewState.CONNECTING if self._tables else ViewState.IDLE)

    async def _shutdown(self) -> None:
        self._closed = True
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
        """Run the view in a background task."""
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self.run(), name=f"view-{self.topic}")
        return self._task

    async def stop(self) -> None:
        """Stop following the table and close the stores (idempotent)."""
        self._stopping = True
        task = self._task
        if task is not None and not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
        elif task is None and self._tables:
            await self._shutdown()

    async def close(self) -> None:
        """Same as :meth:`stop`."""
        await self.stop()

    async def __aenter__(self) -> Self:
        self.start()
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.stop()

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
    ) -> Iterator[tuple[str, Any]]:
        """``(key, value)`` pairs of all partitions in key order, in ``[start, limit)``."""
        self._check_readable()
        merged = heapq.merge(*(t.storage.iterate(start, limit, prefix=prefix) for t in self._tables))
        decode = self.codec.decode
        return ((key, decode(data)) for key, data in merged)

    def evict(self, key: str) -> None:
        """Remove ``key`` from the local copy only (the table topic keeps it)."""
        self._check_readable()
        self._tables[self._partitioner(key.encode(), len(self._tables))].storage.delete(key)

    def stats(self) -> ViewStats:
        """Status and recovery progress per partition."""
        return ViewStats({t.partition: TableStats(t.status, t.recovery, t.writes) for t in self._tables})
