"""Publishing to Pulsar: one producer per topic, created on first use and reused.

``publish`` and ``batch_publish`` hand every message to the client's ``send_async`` (where the
client's batching packs them when ``batching`` is on) and wait once for all receipts. The client
runs with ``block_if_queue_full`` off, so it never blocks the event loop; instead at most
``max_pending_messages`` messages are in flight per producer and further sends wait, on the loop,
for receipts to come back.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Sequence
from typing import Any, Final

import _pulsar  # type: ignore[import-not-found]

from broker import OutboundMessage
from broker.backends.pulsar.callbacks import error_or_value, outcome, settle, wait
from broker.backends.pulsar.mapping import build
from broker.backends.pulsar.settings import PulsarSettings
from broker.driver.publishing import ClosingDriver, DriverPublisher
from broker.errors import BrokerError, PublishError, Timeout

__all__ = ["PulsarPublishDriver", "PulsarPublisher", "producer_configuration"]

_OK: Final = _pulsar.Result.Ok
_COMPRESSION: Final = {
    "none": _pulsar.CompressionType.NONE,
    "lz4": _pulsar.CompressionType.LZ4,
    "zlib": _pulsar.CompressionType.ZLib,
    "zstd": _pulsar.CompressionType.ZSTD,
    "snappy": _pulsar.CompressionType.SNAPPY,
}
#: Seconds closing a producer may take before it is abandoned (closing never hangs).
CLOSE_TIMEOUT: Final = 5.0


def producer_configuration(settings: PulsarSettings) -> Any:
    """The client's producer configuration for ``settings``."""
    conf = _pulsar.ProducerConfiguration()
    conf.send_timeout_millis(max(1, round(settings.send_timeout * 1000)))
    # The flow control that counts is ours (see _Producer); the client's limit only has headroom.
    conf.max_pending_messages(2 * settings.max_pending_messages)
    conf.max_pending_messages_across_partitions(max(50_000, 2 * settings.max_pending_messages))
    conf.block_if_queue_full(False)
    conf.batching_enabled(settings.batching)
    conf.batching_max_messages(settings.batching_max_messages)
    conf.batching_max_allowed_size_in_bytes(settings.batching_max_bytes)
    conf.batching_max_publish_delay_ms(max(0, round(settings.batching_max_delay * 1000)))
    conf.compression_type(_COMPRESSION[settings.compression])
    conf.partitions_routing_mode(_pulsar.PartitionsRoutingMode.RoundRobinDistribution)
    return conf


class _Producer:
    """A client producer with flow control: at most ``limit`` messages in flight.

    A sender that finds the window full waits until every message in flight is acknowledged, then
    sends the next window at once: refilling the window while receipts arrive makes the client's IO
    thread and the event loop hand the GIL back and forth on every receipt, which costs more than
    the pipelining gains. ``sent`` is written by the event loop only, ``acked`` by the client's
    callbacks from an atomic counter; no lock is taken per message. A waiter re-checks after
    registering itself, and every 50 ms, so no wake-up is lost.
    """

    __slots__ = ("acked", "counter", "loop", "producer", "resume_at", "room", "sent", "topic")

    def __init__(self, producer: Any, topic: str, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        self.producer = producer
        self.topic = topic
        self.loop = loop
        self.sent = 0
        self.acked = 0
        self.counter = itertools.count(1)
        self.resume_at = 0
        self.room: asyncio.Future[None] | None = None

    def receipt(self) -> None:
        """Count one receipt (on a client thread); wake a waiting sender once half the room is free."""
        acked = next(self.counter)
        if acked > self.acked:
            self.acked = acked
        room = self.room
        if room is not None and self.sent - acked <= self.resume_at:
            self.room = None
            settle(room, None, None)

    async def wait_for_room(self, limit: int) -> None:
        """Wait until fewer than ``limit`` messages are in flight."""
        while self.sent - self.acked >= limit:
            room = self.room = self.loop.create_future()
            if self.sent - self.acked < limit:
                self.room = None
                return
            await asyncio.wait((room,), timeout=0.05)

    async def close(self) -> None:
        """Flush, then close the client producer; gives up after :data:`CLOSE_TIMEOUT`."""
        future: asyncio.Future[None] = self.loop.create_future()
        self.producer.flush_async(outcome(future))
        try:
            await wait(future, f"flushing the producer of {self.topic!r}", PublishError, CLOSE_TIMEOUT)
        except (BrokerError, TimeoutError):
            pass
        future = self.loop.create_future()
        self.producer.close_async(outcome(future))
        try:
            await wait(future, f"closing the producer of {self.topic!r}", PublishError, CLOSE_TIMEOUT)
        except TimeoutError:
            pass


class _Sending:
    """The receipts of one publish or batch publish; resolves its future once, on the loop."""

    __slots__ = ("count", "done", "failure", "future", "producer")

    def __init__(self, producer: _Producer, count: int) -> None:
        self.producer = producer
        self.count = count
        self.done = itertools.count(1)
        self.failure: Any = None
        self.future: asyncio.Future[None] = producer.loop.create_future()

    def receipt(self, result: Any, message_id: Any) -> None:
        """The client's send callback (runs on a client thread)."""
        self.producer.receipt()
        if result != _OK:
            if self.failure is None:
                self.failure = result
                settle(self.future, result, None)
        elif next(self.done) == self.count:
            settle(self.future, None, None)


class PulsarPublishDriver(ClosingDriver):
    """Publishes through one Pulsar client; a producer per topic, made on its first publish."""

    def __init__(self, client: Any, settings: PulsarSettings) -> None:
        self._client = client
        self._settings = settings
        self._limit = settings.max_pending_messages
        #: Producers made, by topic, and those being made.
        self._made: dict[str, _Producer] = {}
        self._producers: dict[str, asyncio.Future[_Producer]] = {}

    def __repr__(self) -> str:
        return f"<PulsarPublishDriver {len(self._producers)} producers{' closed' if self._closed else ''}>"

    def check_topic(self, name: str) -> None:
        """Any non-empty name (short names live in the default tenant and namespace)."""

    async def _producer(self, topic: str) -> _Producer:
        producer = self._made.get(topic)
        if producer is not None:
            return producer
        loop = asyncio.get_running_loop()
        created = self._producers.get(topic)
        if created is None:
            future: asyncio.Future[Any] = loop.create_future()
            conf = producer_configuration(self._settings)
            self._client.create_producer_async_v2(topic, conf, error_or_value(future))
            created = self._producers[topic] = loop.create_task(self._wrap(future, topic, loop))
        try:
            producer = await asyncio.shield(created)
        except asyncio.CancelledError:
            raise
        except BaseException:
            if self._producers.get(topic) is created:
                del self._producers[topic]
            raise
        self._check_open(topic)
        self._made[topic] = producer
        return producer

    async def _wrap(
        self, future: asyncio.Future[Any], name: str, loop: asyncio.AbstractEventLoop
    ) -> _Producer:
        raw = await wait(future, f"creating a producer for {name!r}", PublishError)
        producer = _Producer(raw, name, self._limit, loop)
        if self._closed:
            await producer.close()
        self._check_open(name)
        return producer

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Publish in order with one wait for every receipt; raises on the first failure.

        Every message is built before any is sent. On a failure, messages the broker already
        accepted stay published.
        """
        self._check_open(topic)
        built = [build(m) for m in messages]
        try:
            async with asyncio.timeout(timeout):
                producer = await self._producer(topic)
                sending = _Sending(producer, len(built))
                send = producer.producer.send_async
                receipt = sending.receipt
                limit = self._limit
                for message in built:
                    if producer.sent - producer.acked >= limit:
                        await producer.wait_for_room(limit)
                        self._check_open(topic)
                    producer.sent += 1
                    send(message, receipt)
                await wait(sending.future, f"publishing to {topic!r}", PublishError)
        except TimeoutError as exc:
            if isinstance(exc, BrokerError):
                raise
            raise Timeout(f"publishing to {topic!r} took longer than {timeout}s") from None

    async def close(self) -> None:
        """Flush and close every producer. Idempotent."""
        if not self._start_closing():
            return
        creations = list(self._producers.values())
        self._producers.clear()
        self._made.clear()
        if not creations:
            return
        # A producer still being created closes itself when it arrives (see _wrap).
        done, _ = await asyncio.wait(creations, timeout=CLOSE_TIMEOUT)
        producers = [t.result() for t in done if not t.cancelled() and t.exception() is None]
        await asyncio.gather(*(p.close() for p in producers), return_exceptions=True)


class PulsarPublisher(DriverPublisher):
    """A Publisher on the backend's Pulsar client and its one publish driver (a producer per topic),
    shared by the backend's publishers: ``close()`` waits for this publisher's sends (up to
    :data:`CLOSE_TIMEOUT`) and leaves the producers open; the backend's ``close()`` closes them."""

    def __init__(self, driver: PulsarPublishDriver) -> None:
        super().__init__(driver, shared=True, close_timeout=CLOSE_TIMEOUT)
