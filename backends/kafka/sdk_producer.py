"""The asyncio side of a confluent-kafka ``Producer``: delivery reports become futures.

``produce()`` only enqueues; librdkafka reports each delivery later, from ``poll()``. Here the
event loop itself calls ``poll(0)`` (which never blocks) from a *pump* task that runs only while
records are outstanding, so delivery callbacks run on the loop thread: no thread hop per record, no
locks, and a whole batch resolves a single future once its last report is in. The pump backs off
from 0.5 ms to 5 ms between polls while nothing arrives.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Final

from broker.backends.kafka.errors import is_refusal, translate
from broker.backends.kafka.threads import SdkThread, resolve, sdk_client
from broker.errors import ClosedError, PublishError, Timeout

__all__ = ["AsyncProducer", "DeliveryBatch"]

log = logging.getLogger("broker.backends.kafka")

_MIN_INTERVAL: Final = 0.0005
_MAX_INTERVAL: Final = 0.005


class DeliveryBatch:
    """Counts the delivery reports of ``count`` records and resolves ``future`` after the last one.

    ``on_delivery`` is the per-record callback handed to ``produce()``; the first failure is kept
    in ``error`` (a ``KafkaError``). Resolution goes through ``call_soon_threadsafe``, so it is
    also safe when the SDK serves a report from another thread (``commit_transaction`` flushing).
    """

    __slots__ = ("error", "future", "loop", "remaining")

    def __init__(self, loop: asyncio.AbstractEventLoop, count: int) -> None:
        self.loop = loop
        self.future: asyncio.Future[None] = loop.create_future()
        self.remaining = count
        self.error: Any = None

    def on_delivery(self, err: Any, msg: Any) -> None:
        """The delivery callback (SDK signature ``(KafkaError | None, Message)``)."""
        if err is not None and self.error is None:
            self.error = err
        self.remaining -= 1
        if self.remaining == 0:
            self.loop.call_soon_threadsafe(resolve, self.future, None)


class AsyncProducer:
    """Owns one confluent-kafka ``Producer``, its delivery pump and a thread for blocking calls."""

    def __init__(
        self, config: dict[str, Any], *, name: str = "producer", close_timeout: float = 10.0
    ) -> None:
        self._user_error_cb = config.get("error_cb")
        self._waiting: set[DeliveryBatch] = set()
        #: True once the broker refused this client (login or certificate): close() then bounds
        #: each SDK step by 1 s, since nothing queued can be delivered and librdkafka only retries.
        self._refused = False
        self.producer = sdk_client("Producer", {**config, "error_cb": self._on_error})
        self.name = name
        self.close_timeout = close_timeout
        self.closed = False
        self._released = False
        self._pump: asyncio.Task[None] | None = None
        self._thread: SdkThread | None = None
        self._room: list[asyncio.Future[None]] = []

    @property
    def thread(self) -> SdkThread:
        """The thread for this producer's blocking calls (transactions, close)."""
        if self._thread is None:
            self._thread = SdkThread(f"polybroker-kafka-{self.name}")
        return self._thread

    def __len__(self) -> int:
        return 0 if self._released else len(self.producer)

    # -- the pump ------------------------------------------------------------------------------
    def kick(self) -> None:
        """Make sure the pump runs (call after enqueuing records)."""
        if self._pump is None and not self._released:
            self._pump = asyncio.get_running_loop().create_task(self._run_pump())

    async def _run_pump(self) -> None:
        producer = self.producer
        poll = producer.poll
        interval = _MIN_INTERVAL
        try:
            while len(producer) > 0:
                if poll(0):
                    interval = _MIN_INTERVAL
                    self._wake_room()
                else:
                    interval = min(interval * 2, _MAX_INTERVAL)
                await asyncio.sleep(interval)
            poll(0)
        finally:
            self._pump = None
            self._wake_room()

    def _wake_room(self) -> None:
        if self._room:
            room, self._room = self._room, []
            for future in room:
                resolve(future, None)

    async def wait_for_room(self) -> None:
        """Wait until some delivery reports were served (after ``BufferError``: the queue is full)."""
        self.producer.poll(0)
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._room.append(future)
        self.kick()
        await _wait_briefly(future)

    def _on_error(self, error: Any) -> None:
        """librdkafka's ``error_cb`` (served by ``poll``): a refusal fails the waiting publishes.

        librdkafka keeps retrying a login the broker refused, or a broker certificate it rejected,
        until each record's delivery timeout; the caller learns why at once instead
        (``AuthenticationFailed``, not retryable, or ``ConnectionFailed`` naming the certificate),
        and the queued records are purged so none of them is delivered after that error was raised.
        """
        if self._user_error_cb is not None:
            self._user_error_cb(error)
        if is_refusal(error):
            self._refused = True
        if not is_refusal(error) or not self._waiting:
            log.debug("%s: %s", self.name, error.str())
            return
        waiting, self._waiting = self._waiting, set()
        for batch in waiting:
            if batch.error is None:
                batch.error = error
            batch.loop.call_soon_threadsafe(resolve, batch.future, None)
        self.producer.purge(in_queue=True, in_flight=False, blocking=False)

    async def wait(self, batch: DeliveryBatch, timeout: float | None, what: str) -> None:
        """Wait for every report of ``batch``; raise ``PublishError`` (or a subclass) on failure."""
        self.kick()
        future = batch.future
        if not future.done():
            self._waiting.add(batch)
            try:
                if timeout is None:
                    await future
                else:
                    try:
                        async with asyncio.timeout(timeout):
                            await asyncio.shield(future)
                    except TimeoutError:
                        raise Timeout(
                            f"{what}: no delivery report within {timeout}s "
                            "(the records may still be delivered)"
                        ) from None
            finally:
                self._waiting.discard(batch)
        if batch.error is not None:
            raise translate(batch.error, what, PublishError)

    async def flush(self, timeout: float | None = None) -> int:
        """Wait until every queued record was delivered (or failed); returns how many remain."""
        loop = asyncio.get_running_loop()
        deadline = None if timeout is None else loop.time() + timeout
        producer = self.producer
        interval = _MIN_INTERVAL
        while len(producer) > 0:
            producer.poll(0)
            if deadline is not None and loop.time() >= deadline:
                break
            await asyncio.sleep(interval)
            interval = min(interval * 2, _MAX_INTERVAL)
        producer.poll(0)
        return len(producer)

    def check_open(self, what: str) -> None:
        """Raise ``ClosedError`` after close."""
        if self.closed:
            raise ClosedError(f"cannot {what}: the Kafka producer is closed")

    async def close(self) -> None:
        """Flush (up to ``close_timeout``), fail what is left, release the SDK producer. Idempotent."""
        if self.closed:
            return
        self.closed = True
        bound = min(self.close_timeout, _REFUSED_CLOSE_BOUND) if self._refused else self.close_timeout
        remaining = await self.flush(bound)
        if remaining:
            log.warning("%s: %d record(s) not delivered within %ss; purging", self.name, remaining, bound)
            self.producer.purge(in_queue=True, in_flight=True, blocking=False)
            await self.flush(1.0)
        self._released = True
        pump = self._pump
        if pump is not None:
            pump.cancel()
            await asyncio.gather(pump, return_exceptions=True)
        thread = self.thread
        try:
            async with asyncio.timeout(bound):
                await thread.submit(self.producer.close)
        except TimeoutError:
            log.warning("%s: the SDK producer did not close within %ss", self.name, bound)
        except Exception as exc:  # closing must not fail the caller's cleanup
            log.debug("%s: close failed: %r", self.name, exc)
        finally:
            thread.stop()


#: Seconds each close step may take once the broker refused the producer.
_REFUSED_CLOSE_BOUND: Final = 1.0


async def _wait_briefly(future: asyncio.Future[None]) -> None:
    try:
        async with asyncio.timeout(_MAX_INTERVAL * 4):
            await future
    except TimeoutError:
        pass
