"""Settling JetStream deliveries: the :class:`~broker.message.Acker` of this backend's messages.

Every settlement is a message to the delivery's ``$JS.ACK...`` reply subject:

==================  =====================  ================================================
``Message``         sent                   effect
==================  =====================  ================================================
``ack()``           ``+ACK``               done; never redelivered
``nack(delay)``     ``-NAK`` (+ delay)     redelivered at once, or after ``delay`` seconds
``in_progress()``   ``+WPI``               the ack-wait clock starts again
``dead_letter()``   ``+TERM <reason>``     never redelivered (after republishing the message to
                                           ``dead_letter_subject`` when one is set)
==================  =====================  ================================================

Acks are sent, not confirmed: ``ack()`` returns once the ack is queued on the connection
(nats-py writes it out at once), which costs no round trip. The server may lose an ack that is
in flight when the connection drops; the message is then redelivered after ``ack_wait`` - the
at-least-once contract. ``ack_sync=true`` makes every settlement a request that returns when
the server has applied it (one round trip each; :meth:`JetStreamAcker.ack_many` sends a batch's
requests together and waits for all).

A nack of the last delivery ``max_deliver`` allows dead-letters the message when a
``dead_letter_subject`` is set, the same as :meth:`~broker.message.Message.dead_letter`.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Final

from nats.aio.client import Client
from nats.aio.msg import Msg

from broker import Message, Record
from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.settings import ConsumerOptions
from broker.driver.acking import claim_acks, release_claim
from broker.driver.settling import ack_in_turn
from broker.errors import AckError, ClosedError

__all__ = ["DeadLetterer", "JetStreamAcker", "JetStreamCommitter", "nak_quietly"]

log = logging.getLogger("broker.backends.jetstream")

ACK: Final = b"+ACK"
NAK: Final = b"-NAK"
PROGRESS: Final = b"+WPI"
TERM: Final = b"+TERM"

#: Republishes a message to the dead-letter subject: ``(message, reason) -> None``.
DeadLetterer = Callable[[Message, str], Awaitable[None]]


def _failure(exc: BaseException, doing: str) -> BaseException:
    if isinstance(exc, asyncio.CancelledError):
        return exc  # a cancelled settle stays a cancellation
    return translate(exc, doing, AckError)


class JetStreamAcker:
    """Settles the messages of one consumer over its connection."""

    def __init__(
        self,
        client: Callable[[], Client | None],
        options: ConsumerOptions,
        request_timeout: float,
        dead_letters: DeadLetterer | None = None,
    ) -> None:
        self._client = client
        self.options = options
        self.sync = options.ack_sync
        self.request_timeout = request_timeout
        self._dead_letters = dead_letters

    def _connected(self) -> Client:
        client = self._client()
        if client is None:
            raise ClosedError("the consumer's NATS connection is gone")
        return client

    async def _send(self, message: Message, payload: bytes, doing: str, sync: bool | None = None) -> None:
        client = self._connected()
        reply: str = message.raw.reply
        try:
            if self.sync if sync is None else sync:
                await client.request(reply, payload, timeout=self.request_timeout)
            else:
                await client.publish(reply, payload)
        except Exception as exc:
            raise _failure(exc, f"{doing} message {message.id}") from exc

    async def ack(self, message: Message) -> None:
        """Acknowledge ``message`` (``+ACK``)."""
        if not self.sync:
            # The hot path: one publish, no round trip.
            client = self._client()
            if client is not None:
                try:
                    await client.publish(message.raw.reply, ACK)
                    return
                except Exception as exc:
                    raise _failure(exc, f"acking message {message.id}") from exc
        await self._send(message, ACK, "acking")

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack this consumer's pending messages among ``messages`` together; returns the others."""
        if not self.sync:
            return await ack_in_turn(messages, self, self.ack)  # publishes: no round trip to wait for
        mine, others = claim_acks(messages, self)
        if not mine:
            return others
        try:
            client = self._connected()
        except ClosedError:
            for message in mine:
                release_claim(message)
            raise
        results = await asyncio.gather(
            *(client.request(m.raw.reply, ACK, timeout=self.request_timeout) for m in mine),
            return_exceptions=True,
        )
        failed: BaseException | None = None
        for message, result in zip(mine, results, strict=True):
            if isinstance(result, BaseException):
                release_claim(message)
                failed = failed or result
        if failed is not None:
            raise _failure(failed, "acking a batch of messages") from failed
        return others

    async def nack(self, message: Message, delay: float | None) -> None:
        """Ask for redelivery (``-NAK``), after ``delay`` seconds when given."""
        limit = self.options.max_deliver
        if limit is not None and self._dead_letters is not None and (message.delivery_attempt or 1) >= limit:
            await self._dead_letter(message, f"nacked on delivery {message.delivery_attempt} of {limit}")
            return
        payload = NAK
        if delay:
            payload = NAK + b" " + json.dumps({"delay": int(delay * 1e9)}).encode()
        await self._send(message, payload, "nacking")

    async def in_progress(self, message: Message) -> None:
        """Restart the message's ack-wait clock (``+WPI``)."""
        await self._send(message, PROGRESS, "extending the ack deadline of")

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Stop redelivering ``message`` (``+TERM``), republishing it to the dead-letter subject first."""
        await self._dead_letter(message, reason or "dead-lettered by the consumer")

    async def _dead_letter(self, message: Message, reason: str) -> None:
        if self._dead_letters is not None:
            await self._dead_letters(message, reason)
        clean = " ".join(reason.split())
        await self._send(message, TERM + b" " + clean.encode() if clean else TERM, "terminating")


class JetStreamCommitter:
    """Commits records of an ``AckPolicy.ALL`` consumer: acking one acks every lower sequence."""

    def __init__(self, client: Callable[[], Client | None], on_commit: Callable[[Record], None]) -> None:
        self._client = client
        self._on_commit = on_commit

    async def commit(self, record: Record) -> None:
        """Ack ``record`` (and so every record before it in its consumer)."""
        client = self._client()
        if client is None:
            raise ClosedError("the consumer's NATS connection is gone")
        try:
            await client.publish(record.raw.reply, ACK)
        except Exception as exc:
            raise _failure(exc, f"committing offset {record.offset}") from exc
        self._on_commit(record)


async def nak_quietly(client: Client | None, msgs: Sequence[Msg], what: str, timeout: float) -> None:
    """Nak deliveries that were never handed out, so they are redelivered now; never raises.

    While connected, the naks are requests and this returns once the server applied them, so a
    consumer started afterwards gets those messages first, in order.
    """
    if client is None or client.is_closed or not msgs:
        return
    try:
        if client.is_connected:
            async with asyncio.timeout(timeout):
                results = await asyncio.gather(
                    *(client.request(msg.reply, NAK, timeout=timeout) for msg in msgs), return_exceptions=True
                )
            failed = [r for r in results if isinstance(r, BaseException)]
            if failed:
                raise failed[0]
        else:
            for msg in msgs:
                await client.publish(msg.reply, NAK)
    except Exception as exc:
        log.warning(
            "could not return %d undelivered message(s) of %s (%r); they are redelivered after ack_wait",
            len(msgs),
            what,
            exc,
        )
