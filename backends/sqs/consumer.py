"""Consuming an SQS queue: the pull driver and its acker.

Each consumer runs one ``ReceiveMessage`` at a time in the background, long-polling up to
``wait_time`` seconds and asking for the consumer's ack deadline as the visibility timeout (whole
seconds, rounded up). A receive outlives a ``next_message()`` that timed out: what it brings waits
in the consumer for the next call. ``close()`` waits for the receive in flight (at most
``close_timeout``) and makes what nobody took visible again at once.

Dead-lettering after ``max_attempts`` is SQS's own where it can be: in queue mode under
``provision=create`` with a ``dead_letter_topic`` (a queue there), the consumer gives its queue a
redrive policy (``RedrivePolicy``: that queue's ARN, ``maxReceiveCount=max_attempts``) and SQS moves
a message received more often to it, unchanged. Elsewhere (SNS mode, where the dead-letter topic is
an SNS topic; no dead-letter topic; ``verify``/``none``) the consumer does it, as below.

Settling: ``ack()`` is ``DeleteMessage`` (a batch of acks: ``DeleteMessageBatch``, ten at a
time); ``nack(delay)`` is ``ChangeMessageVisibility`` to ``delay`` (0 without one; rounded up, at
most 12 h); ``in_progress()`` sets it to the ack deadline again. With client-side dead-lettering, a
message nacked on its last allowed delivery, or received more often than that (its deadline passed
each time), is published to ``dead_letter_topic`` (with the ``x-dead-letter-*`` attributes) and deleted.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from broker import Message, OutboundMessage
from broker.backends.sqs.errors import translate
from broker.backends.sqs.mapping import to_message
from broker.backends.sqs.settings import (
    MAX_VISIBILITY_SECONDS,
    ConsumerOptions,
    whole_seconds,
)
from broker.driver.acking import claim_acks, release_claim, start_ack_deadline
from broker.driver.clock import clock
from broker.driver.pulled import BufferedPull, PulledBatchedMessageIteration, PulledMessageIteration
from broker.errors import AckError, ClosedError, ConfigError, ReceiveError
from broker.retry import ATTR_ATTEMPTS, ATTR_MESSAGE_ID, ATTR_REASON, ATTR_SUBSCRIPTION, ATTR_TOPIC

if TYPE_CHECKING:
    from broker.backends.sqs.backend import SqsConnection, SqsPublishDriver

__all__ = ["SqsAcker", "SqsBatchedMessageIterator", "SqsMessageIterator"]

log = logging.getLogger("broker.backends.sqs")

_SYSTEM_ATTRIBUTES: Any = ["ApproximateReceiveCount", "SentTimestamp", "MessageGroupId"]


def _handle(message: Message) -> str:
    raw = message.raw
    if isinstance(raw, dict) and "ReceiptHandle" in raw:
        return str(raw["ReceiptHandle"])
    raise AckError("the message's raw SQS message (its receipt handle) was replaced: it cannot be settled")


class SqsAcker:
    """The :class:`~broker.message.Acker` of one consumer: deletes and visibility changes on its queue.

    ``Message.raw`` is the SQS message as received (its ``ReceiptHandle`` settles it).
    """

    def __init__(
        self,
        connection: SqsConnection,
        publisher: SqsPublishDriver,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
    ) -> None:
        self._connection = connection
        self._publisher = publisher
        self.topic = topic
        self.subscription = subscription
        self.queue_url = ""
        self.visibility = whole_seconds(options.ack_deadline, MAX_VISIBILITY_SECONDS, "ack_deadline")
        self.max_attempts = options.max_attempts
        self.dead_letter_topic = options.dead_letter_topic
        settings = connection.settings
        #: Whether SQS dead-letters by itself (a redrive policy on the queue, see the module): queue
        #: mode, ``provision=create``, ``max_attempts`` and a ``dead_letter_topic`` (a queue there).
        self.native_redrive = (
            settings.mode == "queue"
            and connection.provision == "create"
            and self.max_attempts is not None
            and self.dead_letter_topic is not None
        )

    def __repr__(self) -> str:
        return f"<SqsAcker {self.topic!r} subscription={self.subscription!r}>"

    def _where(self, doing: str) -> str:
        return f"{doing} on the queue of subscription {self.subscription!r} of {self.topic!r}"

    async def ack(self, message: Message) -> None:
        """``DeleteMessage``."""
        _, sqs = await self._connection.clients()
        try:
            await sqs.delete_message(QueueUrl=self.queue_url, ReceiptHandle=_handle(message))
        except AckError:
            raise
        except Exception as exc:
            raise translate(exc, self._where("acking"), AckError) from exc

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Delete this consumer's messages with ``DeleteMessageBatch`` (ten at a time); return the others."""
        claimed, others = claim_acks(messages, self)
        if not claimed:
            return others
        _, sqs = await self._connection.clients()
        try:
            failed: list[str] = []
            for start in range(0, len(claimed), 10):
                chunk = claimed[start : start + 10]
                answer = await sqs.delete_message_batch(
                    QueueUrl=self.queue_url,
                    Entries=[{"Id": str(i), "ReceiptHandle": _handle(m)} for i, m in enumerate(chunk)],
                )
                failed.extend(f"{f.get('Id')}: {f.get('Code')}" for f in answer.get("Failed", ()))
            if failed:
                raise AckError(self._where(f"acking {len(claimed)} messages: refused {failed}"))
        except BaseException as exc:
            for message in claimed:
                release_claim(message)
            if isinstance(exc, (AckError, asyncio.CancelledError)) or not isinstance(exc, Exception):
                raise
            raise translate(exc, self._where(f"acking {len(claimed)} messages"), AckError) from exc
        return others

    async def _visibility(self, message: Message, seconds: int, doing: str) -> None:
        _, sqs = await self._connection.clients()
        try:
            await sqs.change_message_visibility(
                QueueUrl=self.queue_url, ReceiptHandle=_handle(message), VisibilityTimeout=seconds
            )
        except AckError:
            raise
        except Exception as exc:
            raise translate(exc, self._where(doing), AckError) from exc

    async def nack(self, message: Message, delay: float | None) -> None:
        """Make the message visible again at once, or after ``delay`` seconds (rounded up, at most
        12 h); dead-letter it instead when this was its last allowed delivery (``max_attempts``)."""
        attempt = message.delivery_attempt or 1
        if self.max_attempts is not None and attempt >= self.max_attempts and not self.native_redrive:
            await self.move_out(message, f"nacked on delivery {attempt} (max_attempts={self.max_attempts})")
            return
        seconds = whole_seconds(delay or 0.0, MAX_VISIBILITY_SECONDS, "a nack delay")
        await self._visibility(message, seconds, "nacking")

    async def in_progress(self, message: Message) -> None:
        """Hide the message for another ack deadline (``ChangeMessageVisibility``)."""
        await self._visibility(message, self.visibility, "extending the deadline")

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Publish the message to the dead-letter topic (when there is one) and delete it."""
        await self.move_out(message, reason or "dead-lettered by the consumer")

    async def move_out(self, message: Message, reason: str) -> None:
        """Publish a copy of ``message`` to the dead-letter topic with the reason as attributes, then
        delete it; without a dead-letter topic it is deleted and dropped (with a warning)."""
        topic = self.dead_letter_topic
        if topic is not None:
            attributes = {
                **message.attributes,
                ATTR_REASON: reason,
                ATTR_TOPIC: self.topic,
                ATTR_SUBSCRIPTION: self.subscription,
                ATTR_ATTEMPTS: str(message.delivery_attempt or 1),
                ATTR_MESSAGE_ID: message.id,
            }
            letter = OutboundMessage(message.data, key=message.key, attributes=attributes)
            try:
                await self._publisher.send(topic, [letter], None)
            except Exception as exc:
                raise AckError(self._where(f"dead-lettering to {topic!r}: {exc}")) from exc
        else:
            log.warning("%r: dropping message %s (%s): no dead_letter_topic", self, message.id, reason)
        await self.ack(message)


class SqsMessages(BufferedPull):
    """The pull driver shared by both iterators: one background receive at a time, a buffer."""

    def __init__(
        self,
        connection: SqsConnection,
        publisher: SqsPublishDriver,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
    ) -> None:
        self._connection = connection
        self.topic = topic
        self.subscription = subscription
        self.options = options
        self.acker = SqsAcker(connection, publisher, topic, subscription, options)
        self._wait = whole_seconds(options.wait_time, 20, "wait_time")
        self._queue_url: str | None = None
        self._init_pull()

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic!r} subscription={self.subscription!r}>"

    async def __aenter__(self) -> Any:
        await self._ensure_queue()
        return self

    async def _ensure_queue(self) -> str:
        if self._queue_url is None:
            if self._closed:
                raise ClosedError(f"{self!r} is closed")
            try:
                url = await self._connection.subscription_queue(
                    self.topic, self.subscription, self.acker.visibility
                )
            except Exception as exc:
                raise translate(
                    exc, f"opening subscription {self.subscription!r} of {self.topic!r}", ReceiveError
                ) from exc
            if self.acker.native_redrive:
                assert self.acker.dead_letter_topic is not None and self.acker.max_attempts is not None
                try:
                    await self._connection.redrive(url, self.acker.dead_letter_topic, self.acker.max_attempts)
                except Exception as exc:
                    doing = f"dead-lettering subscription {self.subscription!r} of {self.topic!r}"
                    raise translate(exc, doing, ReceiveError) from exc
            self._queue_url = self.acker.queue_url = url
        return self._queue_url

    async def _fetch(self, limit: int) -> list[Message]:
        """One ``ReceiveMessage`` (long polling); messages received too often are dead-lettered."""
        url = await self._ensure_queue()
        _, sqs = await self._connection.clients()
        try:
            answer = await sqs.receive_message(
                QueueUrl=url,
                MaxNumberOfMessages=10,  # the rest wait in the buffer: one receive serves ten takes
                WaitTimeSeconds=self._wait,
                VisibilityTimeout=self.acker.visibility,
                MessageAttributeNames=["All"],
                MessageSystemAttributeNames=_SYSTEM_ATTRIBUTES,
            )
        except Exception as exc:
            raise translate(
                exc, f"receiving from subscription {self.subscription!r} of {self.topic!r}", ReceiveError
            ) from exc
        received = clock.monotonic()
        now = clock.time()
        fifo = self._connection.settings.fifo
        messages = [to_message(url, m, self.acker, now, fifo) for m in answer.get("Messages", ())]
        most = self.options.max_attempts
        if most is not None and not self.acker.native_redrive:
            kept = []
            for message in messages:
                if (message.delivery_attempt or 1) > most:
                    await self.acker.move_out(
                        message, f"not acked after {most} deliveries (max_attempts={most})"
                    )
                else:
                    kept.append(message)
            messages = kept
        start_ack_deadline(messages, self.options.ack_deadline, since=received)
        return messages

    async def close(self) -> None:
        """Stop receiving: wait for the receive in flight, make what nobody took visible again."""
        if self._closed:
            return
        timeout = self._connection.settings.close_timeout
        # The long poll in flight is waited for (what it brings is released with the rest).
        left = await self._stop_reading(timeout)
        if left and self._queue_url is not None:
            try:
                async with asyncio.timeout(timeout):
                    for message in left:
                        await self.acker._visibility(message, 0, "releasing a message nobody took")
            except (Exception, TimeoutError) as exc:
                log.warning(
                    "%r: could not release its messages on close (%s); they come back after the deadline",
                    self,
                    exc,
                )


class SqsMessageIterator(SqsMessages, PulledMessageIteration):
    """``messages()``: one message per ``next_message()``."""


class SqsBatchedMessageIterator(SqsMessages, PulledBatchedMessageIteration):
    """``batched_messages()``: up to ``batch_size`` messages per ``next_batch()``."""

    def __init__(
        self,
        connection: SqsConnection,
        publisher: SqsPublishDriver,
        topic: str,
        subscription: str,
        options: ConsumerOptions,
        batch_size: int,
        batch_timeout: float,
    ) -> None:
        super().__init__(connection, publisher, topic, subscription, options)
        if batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {batch_size}")
        self.batch_size = batch_size
        self.batch_timeout = batch_timeout
