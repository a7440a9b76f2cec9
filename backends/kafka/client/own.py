"""kefka's package functions over the application's *own* confluent-kafka clients.

kefka offers, beside its wrapper types, functions that work on a ``*kafka.Producer`` or
``*kafka.Consumer`` the application made itself: ``FlushAll(p)``, ``SyncProduce(ctx, p, ...)``,
``SyncProduceMessage(ctx, p, msg)`` and ``Consume(consumer, handler, errCb) CancelFunc``. Here they
are coroutines and a task over a ``confluent_kafka.Producer`` / ``confluent_kafka.Consumer``:

* :func:`flush_all` flushes until nothing is queued (kefka's loop never re-read what remained and
  could spin forever; this one ends once every record was delivered or failed);
* :func:`sync_produce` / :func:`sync_produce_message` produce one record and wait for its delivery
  report, serving the producer's callbacks (``poll``) on a worker thread meanwhile: a plain
  confluent-kafka producer only reports deliveries when polled. ``timeout`` bounds the wait, not
  the delivery;
* :func:`consume` runs ``handler(message, commit)`` for every message of a subscribed consumer in
  an asyncio task (cancelling the task is kefka's ``CancelFunc``); ``await commit()`` commits the
  message synchronously; polling and reading errors go to ``error_callback`` and consuming goes on,
  a fatal librdkafka error is reported and ends the task (see :mod:`.consumer`).

Every SDK call on the consumer runs on one worker thread of its own (librdkafka wants one poller);
the application must not poll the consumer itself while :func:`consume` runs.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.client.consumer import Commit, ErrorCallback, MessageHandler
from broker.backends.kafka.client.logs import LoggerLike, TransientErrors, is_fatal, resolve_logger
from broker.backends.kafka.client.producer import DeliveryReport, _report
from broker.backends.kafka.errors import translate
from broker.backends.kafka.threads import resolve
from broker.errors import AckError, ConfigError, PublishError, ReceiveError, Timeout

__all__ = ["consume", "flush_all", "sync_produce", "sync_produce_message"]

log = logging.getLogger("broker.backends.kafka.client")

#: How long one ``poll`` of a waiting sync produce lasts (seconds).
_POLL_SLICE = 0.05


async def flush_all(producer: Any, *, step: float = 5.0, logger: LoggerLike | None = None) -> None:
    """Flush the application's ``confluent_kafka.Producer`` until nothing is queued (kefka's ``FlushAll``).

    Re-checks what remains after every ``step`` seconds; ends once every record was delivered or
    failed (each fails at the latest after librdkafka's ``message.timeout.ms``).
    """
    out = resolve_logger(logger)
    while True:
        remaining = int(await asyncio.to_thread(producer.flush, step))
        if remaining == 0:
            return
        out.info("flush_all: %d record(s) still queued", remaining)


async def _produce_and_wait(
    producer: Any, topic: str, timeout: float | None, kwargs: dict[str, Any]
) -> DeliveryReport:
    loop = asyncio.get_running_loop()
    future: asyncio.Future[DeliveryReport] = loop.create_future()

    def deliver(err: Any, msg: Any) -> None:
        loop.call_soon_threadsafe(resolve, future, _report(err, msg))

    try:
        producer.produce(topic, on_delivery=deliver, **kwargs)
    except BufferError as exc:
        raise PublishError(
            f"the record for {topic!r} could not be enqueued: the local queue is full"
        ) from exc
    except sdk.confluent().KafkaException as exc:
        raise translate(exc, f"the record for {topic!r} could not be enqueued", PublishError) from exc
    deadline = None if timeout is None else loop.time() + timeout
    while not future.done():
        if deadline is not None and loop.time() >= deadline:
            raise Timeout(
                f"no delivery report for the record to {topic!r} within {timeout}s; it may still be delivered"
            )
        await asyncio.to_thread(producer.poll, _POLL_SLICE)  # serves the delivery callback
    report = future.result()
    if report.error is not None:
        raise report.error
    return report


async def sync_produce(
    producer: Any,
    topic: str,
    key: bytes | str | None,
    value: bytes | str | None,
    *,
    timeout: float | None = None,
    partition: int | None = None,
    headers: Mapping[str, str | bytes] | None = None,
) -> DeliveryReport:
    """Produce with the application's producer and wait for the delivery report (kefka's ``SyncProduce``).

    Raises ``PublishError`` (or a subclass) when delivery failed, ``Timeout`` when no report came
    within ``timeout`` seconds (the record may still be delivered).
    """
    return await sync_produce_message(
        producer, topic, value, key=key, partition=partition, headers=headers, timeout=timeout
    )


async def sync_produce_message(
    producer: Any,
    topic: str,
    value: bytes | str | None,
    *,
    key: bytes | str | None = None,
    partition: int | None = None,
    headers: Mapping[str, str | bytes] | None = None,
    timestamp: int | None = None,
    timeout: float | None = None,
) -> DeliveryReport:
    """Produce one record as given (``timestamp`` in epoch ms) and wait (kefka's ``SyncProduceMessage``)."""
    kwargs: dict[str, Any] = {"key": key, "value": value}
    if partition is not None:
        kwargs["partition"] = partition
    if headers:
        kwargs["headers"] = dict(headers)
    if timestamp is not None:
        kwargs["timestamp"] = timestamp
    return await _produce_and_wait(producer, topic, timeout, kwargs)


def consume(
    consumer: Any,
    handler: MessageHandler,
    error_callback: ErrorCallback | None = None,
    *,
    poll_timeout: float = 1.0,
    batch_size: int = 100,
    logger: LoggerLike | None = None,
) -> asyncio.Task[None]:
    """Run ``handler(message, commit)`` over the application's subscribed consumer (kefka's ``Consume``).

    Returns the task doing it: ``task.cancel()`` stops consuming (kefka's ``CancelFunc``); the
    consumer stays open (close it yourself). A handler that raises is reported to
    ``error_callback``, and consuming goes on.
    """
    if consumer is None or handler is None:
        raise ConfigError("consume() needs a consumer and a handler")
    out = resolve_logger(logger)
    transient = TransientErrors(out, error_callback)
    transient.loop = asyncio.get_running_loop()
    return asyncio.get_running_loop().create_task(
        _consume(consumer, handler, transient, poll_timeout, batch_size), name="kafka-client-consume"
    )


def _report_failure(transient: TransientErrors, exc: BaseException, what: str) -> None:
    transient.logger.error("%s: %s", what, exc, exc_info=exc)
    if transient.error_callback is not None:
        try:
            transient.error_callback(exc)
        except Exception:
            transient.logger.exception("the error callback raised")


async def _consume(
    consumer: Any, handler: MessageHandler, transient: TransientErrors, poll_timeout: float, batch_size: int
) -> None:
    loop = asyncio.get_running_loop()
    worker = concurrent.futures.ThreadPoolExecutor(max_workers=1, thread_name_prefix="kafka-client-consume")

    def on_worker(call: Callable[..., Any], *args: Any, **kwargs: Any) -> Awaitable[Any]:
        return loop.run_in_executor(worker, lambda: call(*args, **kwargs))

    def commit_of(message: Any) -> Commit:
        async def commit() -> None:
            try:
                await on_worker(consumer.commit, message=message, asynchronous=False)
            except Exception as exc:
                raise translate(exc, "committing the message failed", AckError) from exc

        return commit

    try:
        while True:
            try:
                messages = await on_worker(consumer.consume, batch_size, poll_timeout)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                failure = translate(exc, "consuming failed", ReceiveError)
                _report_failure(transient, failure, "consuming failed")
                if is_fatal(failure):
                    raise failure from exc
                await asyncio.sleep(min(max(poll_timeout, 0.05), 1.0))
                continue
            for message in messages:
                error = message.error()
                if error is not None:
                    if error.fatal():
                        failure = translate(error, "consuming failed", ReceiveError)
                        _report_failure(transient, failure, "consuming failed")
                        raise failure
                    transient.on_event(message.topic(), error)
                    continue
                try:
                    result = handler(message, commit_of(message))
                    if inspect.isawaitable(result):
                        await result
                except Exception as exc:
                    _report_failure(
                        transient,
                        exc,
                        f"the handler failed on {message.topic()}[{message.partition()}]@{message.offset()}",
                    )
    finally:
        # Let the poll in flight end (at most poll_timeout) before the application may close the
        # consumer: librdkafka must not be closed under a running poll.
        worker.shutdown(wait=False, cancel_futures=True)
        done = loop.run_in_executor(None, worker.shutdown, True)
        try:
            await asyncio.wait_for(asyncio.shield(done), poll_timeout + 5.0)
        except (TimeoutError, asyncio.CancelledError):
            log.warning("consume(): the last poll did not end within %.1fs", poll_timeout + 5.0)
