"""The helpers' ``Producer``: codecs for keys and values, async and synchronous produce, flushing.

``produce`` and ``produce_message`` only enqueue (call them from a coroutine: delivery reports are
served by the running event loop). Their optional ``on_delivery`` gets a :class:`DeliveryReport`
on the event loop; without one, failures are logged at ERROR and successes at DEBUG.
``sync_produce`` waits for the report. Its ``timeout`` stops the *wait*, not the delivery: after a
``Timeout`` the record may still be delivered.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.client.codecs import resolve_codec
from broker.backends.kafka.client.logs import LoggerLike, resolve_logger, with_sdk_logger
from broker.backends.kafka.errors import translate
from broker.backends.kafka.sdk_producer import AsyncProducer
from broker.backends.kafka.threads import resolve
from broker.codecs import Codec
from broker.driver.forwarding import Forwarded
from broker.driver.resources import AsyncResource
from broker.errors import BrokerError, EncodeError, PublishError, Timeout

__all__ = ["DeliveryCallback", "DeliveryReport", "Producer"]


@dataclass(frozen=True, slots=True)
class DeliveryReport:
    """The outcome of one produced record."""

    topic: str
    partition: int
    offset: int
    #: None when delivered, else the (wrapped) delivery failure.
    error: BrokerError | None = None
    #: The SDK's ``Message`` (escape hatch).
    raw: Any = field(default=None, repr=False, compare=False)

    @property
    def ok(self) -> bool:
        """True when the record was delivered."""
        return self.error is None


#: Called on the event loop with each record's report.
DeliveryCallback = Callable[[DeliveryReport], None]


def _report(err: Any, msg: Any) -> DeliveryReport:
    topic = msg.topic() or ""
    error = translate(err, f"delivery to {topic!r} failed", PublishError) if err is not None else None
    partition = msg.partition()
    offset = msg.offset()
    return DeliveryReport(
        topic, -1 if partition is None else partition, -1 if offset is None else offset, error, msg
    )


class Producer(AsyncResource):
    """A Kafka producer with key and value codecs.

    ``config`` is librdkafka's configuration (``bootstrap.servers`` at least); it is used as given,
    plus ``logger`` when it names none.
    """

    def __init__(
        self,
        config: Mapping[str, Any],
        *,
        key_codec: str | Codec[Any] = "str",
        value_codec: str | Codec[Any] = "json",
        logger: LoggerLike | None = None,
        close_timeout: float = 10.0,
    ) -> None:
        self.log = resolve_logger(logger)
        self.key_codec = resolve_codec(key_codec)
        self.value_codec = resolve_codec(value_codec)
        self._owner = AsyncProducer(
            with_sdk_logger(config, self.log), name="client-producer", close_timeout=close_timeout
        )

    producer: Forwarded[Any] = Forwarded("_owner", "The confluent-kafka ``Producer`` (escape hatch).")

    def __len__(self) -> int:
        """Records queued or in flight, and reports not yet served."""
        return len(self._owner)

    def _encode(self, topic: str, key: Any, value: Any) -> tuple[bytes | None, bytes | None]:
        try:
            raw_key = None if key is None else self.key_codec.encode(key)
        except EncodeError as exc:
            raise EncodeError(f"cannot encode the key of a record for {topic!r}: {exc}") from exc
        try:
            raw_value = None if value is None else self.value_codec.encode(value)
        except EncodeError as exc:
            raise EncodeError(f"cannot encode the value of a record for {topic!r}: {exc}") from exc
        return raw_key, raw_value

    def _callback(self, on_delivery: DeliveryCallback | None) -> Callable[[Any, Any], None]:
        log = self.log

        def deliver(err: Any, msg: Any) -> None:
            report = _report(err, msg)
            if on_delivery is not None:
                try:
                    on_delivery(report)
                except Exception:
                    log.exception("the delivery callback raised")
            elif report.error is not None:
                log.error("%s", report.error)
            else:
                log.debug("delivered to %s[%d]@%d", report.topic, report.partition, report.offset)

        return deliver

    def _enqueue(
        self,
        topic: str,
        value: Any,
        key: Any,
        partition: int | None,
        headers: Any,
        timestamp: int | None,
        callback: Callable[[Any, Any], None],
    ) -> None:
        owner = self._owner
        owner.check_open("produce")
        kwargs: dict[str, Any] = {"on_delivery": callback}
        if partition is not None:
            kwargs["partition"] = partition
        if headers:
            kwargs["headers"] = dict(headers) if isinstance(headers, Mapping) else list(headers)
        if timestamp is not None:
            kwargs["timestamp"] = timestamp
        ck = sdk.confluent()
        try:
            owner.producer.produce(topic, value, key, **kwargs)
        except BufferError as exc:
            raise PublishError(
                f"the record for {topic!r} could not be enqueued: the local queue is full"
            ) from exc
        except ck.KafkaException as exc:
            raise translate(exc, f"the record for {topic!r} could not be enqueued", PublishError) from exc
        owner.kick()

    def produce(
        self,
        topic: str,
        key: Any,
        value: Any,
        *,
        partition: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Encode ``key`` and ``value`` with the codecs and enqueue the record (returns at once).

        ``None`` stays ``None`` (no key; a tombstone value). Raises ``EncodeError`` when a codec
        refuses a value, ``PublishError`` when the record cannot be enqueued.
        """
        raw_key, raw_value = self._encode(topic, key, value)
        self._enqueue(topic, raw_value, raw_key, partition, headers, None, self._callback(on_delivery))

    def produce_message(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        timestamp: int | None = None,
        on_delivery: DeliveryCallback | None = None,
    ) -> None:
        """Enqueue a record as given, without codecs (``timestamp`` in epoch milliseconds)."""
        self._enqueue(topic, value, key, partition, headers, timestamp, self._callback(on_delivery))

    async def _wait(
        self, topic: str, timeout: float | None, enqueue: Callable[[Any], None]
    ) -> DeliveryReport:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[DeliveryReport] = loop.create_future()

        def deliver(err: Any, msg: Any) -> None:
            loop.call_soon_threadsafe(resolve, future, _report(err, msg))

        enqueue(deliver)
        try:
            async with asyncio.timeout(timeout):
                report = await asyncio.shield(future)
        except TimeoutError:
            raise Timeout(
                f"no delivery report for the record to {topic!r} within {timeout}s; it may still be delivered"
            ) from None
        if report.error is not None:
            raise report.error
        return report

    async def sync_produce(
        self,
        topic: str,
        key: Any,
        value: Any,
        *,
        timeout: float | None = None,
        partition: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
    ) -> DeliveryReport:
        """Produce and wait for the delivery report.

        ``timeout`` (seconds) bounds the wait only: on ``Timeout`` the record may still be
        delivered. A failed delivery raises ``PublishError`` (or a subclass).
        """
        raw_key, raw_value = self._encode(topic, key, value)
        return await self._wait(
            topic,
            timeout,
            lambda callback: self._enqueue(topic, raw_value, raw_key, partition, headers, None, callback),
        )

    async def sync_produce_message(
        self,
        topic: str,
        value: bytes | None,
        *,
        key: bytes | str | None = None,
        partition: int | None = None,
        headers: Mapping[str, str | bytes] | None = None,
        timestamp: int | None = None,
        timeout: float | None = None,
    ) -> DeliveryReport:
        """``produce_message`` and wait for the report (a timeout stops the wait, not the delivery)."""
        return await self._wait(
            topic,
            timeout,
            lambda callback: self._enqueue(topic, value, key, partition, headers, timestamp, callback),
        )

    async def flush(self, timeout: float) -> int:
        """Wait up to ``timeout`` seconds for queued records; returns how many are still queued."""
        return await self._owner.flush(timeout)

    async def flush_all(self, *, step: float = 5.0) -> None:
        """Flush until the queue is empty, re-checking what remains after every ``step`` seconds.

        Ends once every record was delivered or failed (each fails at the latest after
        librdkafka's ``message.timeout.ms``), so it terminates even when the brokers are gone.
        """
        while True:
            remaining = await self._owner.flush(step)
            if remaining == 0:
                return
            self.log.info("flush_all: %d record(s) still queued", remaining)

    async def close(self) -> None:
        """Flush (up to ``close_timeout``) and release the producer. Idempotent."""
        await self._owner.close()
