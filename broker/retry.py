"""Retry policies: backoff, a maximum of attempts, dead-lettering and an error-rate circuit breaker.

Written once above every backend. A :class:`RetryPolicy` is applied by receivers
(``backend.receiver(topic, sub, retry=RetryPolicy(...))``, ``broker.adapt.receiver(iterator,
retry=...)``) or by hand around any iterator with a :class:`Retrier`
(``retrier = policy.bind(publisher=..., topic=...)`` then ``await retrier.handle(item, handler)``).

Two modes:

- ``"unordered"`` (default): a failed message is nacked with the backoff delay for its attempt
  (the broker's delayed redelivery where it has one, see ``Capabilities.delayed_nack``) and never
  holds up other messages.
- ``"ordered"``: the failed message (or :class:`~broker.message.Record`, which has no nack) is
  retried in place: sleep the backoff, call the handler again. Its key (or partition) is blocked
  until it succeeds or is dead-lettered, so order is kept. Receivers in ordered mode hand the
  messages of one key to one worker at a time; other keys keep flowing on the other workers.

After ``max_attempts`` failed attempts, or at once for an exception of a ``non_retryable`` type
or a :class:`~broker.errors.DecodeError` (a payload that does not decode never will), the message
is dead-lettered: ``dead_letter="native"`` calls ``Message.dead_letter(reason)``
(the broker's own dead-letter queue); ``DeadLetterTopic(name)`` publishes a copy to that topic
with ``x-dead-letter-*`` attributes saying why, and acks the original only once the broker has
the copy. Attempts are the broker's ``Message.delivery_attempt`` where it counts (in-memory,
Kafka queue, JetStream, Pulsar, Service Bus, Pub/Sub with a dead-letter policy), else counted
by the consumer process (:class:`~broker.backoff.FailureCounter`).
"""

from __future__ import annotations

import asyncio
import inspect
import logging
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Final, Literal

from broker.backoff import DEFAULT_BACKOFF, Backoff, FailureCounter
from broker.driver.clock import monotonic, wall
from broker.errors import ConfigError, DecodeError, NotSupported
from broker.interfaces import Publisher, Topic
from broker.message import Message, OutboundMessage, Record

__all__ = [
    "ATTR_ATTEMPTS",
    "ATTR_ERROR",
    "ATTR_ERROR_TYPE",
    "ATTR_FIRST_FAILURE",
    "ATTR_LAST_FAILURE",
    "ATTR_MESSAGE_ID",
    "ATTR_REASON",
    "ATTR_SUBSCRIPTION",
    "ATTR_TOPIC",
    "NATIVE",
    "DeadLetterTopic",
    "ErrorThreshold",
    "Outcome",
    "Retrier",
    "RetryPolicy",
    "ThresholdEvent",
]

log = logging.getLogger("broker.retry")

#: ``RetryPolicy(dead_letter=NATIVE)``: the broker's own dead-letter (``Message.dead_letter``).
NATIVE: Final = "native"

#: Dead-letter attributes set by :class:`DeadLetterTopic` (the original attributes are kept).
ATTR_REASON: Final = "x-dead-letter-reason"
ATTR_TOPIC: Final = "x-dead-letter-topic"
ATTR_SUBSCRIPTION: Final = "x-dead-letter-subscription"
ATTR_ERROR_TYPE: Final = "x-dead-letter-error-type"
ATTR_ERROR: Final = "x-dead-letter-error"
ATTR_ATTEMPTS: Final = "x-dead-letter-attempts"
ATTR_FIRST_FAILURE: Final = "x-dead-letter-first-failure"
ATTR_LAST_FAILURE: Final = "x-dead-letter-last-failure"
ATTR_MESSAGE_ID: Final = "x-dead-letter-message-id"

#: What :meth:`Retrier.handle` did: the handler succeeded, the message was nacked for a retry,
#: dead-lettered, or the handler settled it itself before raising.
Outcome = Literal["handled", "retrying", "dead-lettered", "settled"]

Mode = Literal["unordered", "ordered"]


@dataclass(frozen=True, slots=True)
class DeadLetterTopic:
    """A portable dead-letter destination: publish the failed message to topic ``name``, then ack it.

    ``publisher`` defaults to the backend's own when the policy is given to ``backend.receiver``;
    elsewhere pass one (it may belong to another backend). The error message in
    ``x-dead-letter-error`` is cut to ``max_error_length`` characters.
    """

    name: str
    publisher: Publisher | None = field(default=None, compare=False, repr=False)
    max_error_length: int = 1024

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ConfigError(f"DeadLetterTopic needs a topic name, got {self.name!r}")
        if self.max_error_length < 0:
            raise ConfigError(f"max_error_length must be >= 0, got {self.max_error_length}")


@dataclass(frozen=True, slots=True)
class ErrorThreshold:
    """Circuit breaker: ``failures`` handler failures within ``window`` seconds pause consumption.

    While paused (``cooldown`` seconds) a receiver takes no new messages; handlers already
    running go on. Then it resumes, with the failure count reset.
    """

    failures: int
    window: float = 60.0
    cooldown: float = 30.0

    def __post_init__(self) -> None:
        if self.failures < 1 or self.window <= 0 or self.cooldown < 0:
            raise ConfigError(f"ErrorThreshold needs failures >= 1, window > 0, cooldown >= 0; got {self}")


@dataclass(frozen=True, slots=True)
class ThresholdEvent:
    """Passed to ``on_threshold`` when the error threshold trips."""

    #: Failures counted within the window.
    failures: int
    #: The threshold that tripped.
    threshold: ErrorThreshold
    #: The failure that tripped it.
    error: BaseException
    #: Seconds until consumption resumes.
    cooldown: float


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed handler calls are retried and when a message is given up (dead-lettered).

    - ``max_attempts``: handler calls per message before it is dead-lettered (None: retry forever).
    - ``backoff``: the delay before attempt ``n + 1`` after ``n`` failures (jitter included).
    - ``dead_letter``: ``"native"`` (``Message.dead_letter``), a :class:`DeadLetterTopic`, or None
      (then ``max_attempts`` and ``non_retryable`` must not be set).
    - ``non_retryable``: exception types that dead-letter at once (``broker.errors.DecodeError``
      always does when there is a dead-letter destination).
    - ``mode``: ``"unordered"`` (nack with delay) or ``"ordered"`` (retry in place; see the module).
    - ``error_threshold`` and ``on_threshold``: the circuit breaker and its callback (sync or async).
    """

    max_attempts: int | None = None
    backoff: Backoff = DEFAULT_BACKOFF
    dead_letter: DeadLetterTopic | Literal["native"] | None = NATIVE
    non_retryable: tuple[type[BaseException], ...] = ()
    mode: Mode = "unordered"
    error_threshold: ErrorThreshold | None = None
    on_threshold: Callable[[ThresholdEvent], Any] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if self.max_attempts is not None and (
            not isinstance(self.max_attempts, int) or self.max_attempts < 1
        ):
            raise ConfigError(f"max_attempts must be an int >= 1 or None, got {self.max_attempts!r}")
        if not isinstance(self.backoff, Backoff):
            raise ConfigError(f"backoff must be a broker.Backoff, got {self.backoff!r}")
        if self.mode not in ("unordered", "ordered"):
            raise ConfigError(f"mode must be 'unordered' or 'ordered', got {self.mode!r}")
        if not isinstance(self.non_retryable, tuple) or not all(
            isinstance(t, type) and issubclass(t, BaseException) for t in self.non_retryable
        ):
            raise ConfigError(f"non_retryable must be a tuple of exception types, got {self.non_retryable!r}")
        if self.dead_letter is not None and self.dead_letter != NATIVE:
            if not isinstance(self.dead_letter, DeadLetterTopic):
                raise ConfigError(
                    f"dead_letter must be 'native', a DeadLetterTopic or None, got {self.dead_letter!r}"
                )
        if self.dead_letter is None and (self.max_attempts is not None or self.non_retryable):
            raise ConfigError("max_attempts and non_retryable need a dead_letter destination")
        if self.on_threshold is not None and self.error_threshold is None:
            raise ConfigError("on_threshold needs an error_threshold")

    def bind(
        self,
        *,
        publisher: Publisher | None = None,
        topic: str | None = None,
        subscription: str | None = None,
        clock: Callable[[], float] = monotonic,
        now: Callable[[], float] = wall,
    ) -> Retrier:
        """A :class:`Retrier` applying this policy to the messages of ``topic``/``subscription``.

        ``publisher`` serves a :class:`DeadLetterTopic` that names none (ConfigError if neither
        does). ``clock`` (monotonic) drives the breaker, ``now`` (wall time) the failure times.
        """
        return Retrier(
            self, publisher=publisher, topic=topic, subscription=subscription, clock=clock, now=now
        )


class _Breaker:
    def __init__(self, threshold: ErrorThreshold, clock: Callable[[], float]) -> None:
        self.threshold = threshold
        self._clock = clock
        self._failures: deque[float] = deque()
        self.paused_until = float("-inf")

    def record(self, error: BaseException) -> ThresholdEvent | None:
        now = self._clock()
        failures = self._failures
        failures.append(now)
        horizon = now - self.threshold.window
        while failures and failures[0] <= horizon:
            failures.popleft()
        if len(failures) < self.threshold.failures or now < self.paused_until:
            return None
        count = len(failures)
        failures.clear()
        self.paused_until = now + self.threshold.cooldown
        return ThresholdEvent(count, self.threshold, error, self.threshold.cooldown)


def _iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class Retrier:
    """A :class:`RetryPolicy` at work: failure counts, the breaker, the dead-letter topic handle.

    One per receiver (receivers make theirs); make one with :meth:`RetryPolicy.bind` to apply a
    policy around an iterator: ``await retrier.handle(item, handler)`` for each item. The handler
    settles the item itself (``ack()``) on success, as with receivers.
    """

    def __init__(
        self,
        policy: RetryPolicy,
        *,
        publisher: Publisher | None = None,
        topic: str | None = None,
        subscription: str | None = None,
        clock: Callable[[], float] = monotonic,
        now: Callable[[], float] = wall,
    ) -> None:
        self.policy = policy
        self.topic = topic
        self.subscription = subscription
        self._clock = clock
        self._now = now
        self._failures = FailureCounter()
        self._dead_topic: Topic | None = None
        dead = policy.dead_letter
        if isinstance(dead, DeadLetterTopic):
            chosen = dead.publisher or publisher
            if chosen is None:
                raise ConfigError(
                    f"DeadLetterTopic({dead.name!r}) needs a publisher: pass DeadLetterTopic(name, "
                    "publisher=...) or give the policy to backend.receiver(...)"
                )
            self._dead_topic = chosen.topic(dead.name)
        self._breaker = _Breaker(policy.error_threshold, clock) if policy.error_threshold else None
        #: Counts of outcomes and breaker trips, for metrics and tests.
        self.counts: dict[str, int] = {"handled": 0, "retrying": 0, "dead-lettered": 0, "paused": 0}

    @property
    def ordered(self) -> bool:
        """True in ``"ordered"`` mode."""
        return self.policy.mode == "ordered"

    @property
    def paused(self) -> bool:
        """True while the error threshold holds consumption."""
        return self._breaker is not None and self._clock() < self._breaker.paused_until

    async def wait_if_paused(self) -> None:
        """Return at once, or when the breaker's cool-down is over."""
        breaker = self._breaker
        if breaker is None:
            return
        while (remaining := breaker.paused_until - self._clock()) > 0:  # noqa: ASYNC110 - a deadline
            await asyncio.sleep(remaining)

    async def handle(self, item: Message | Record, handler: Callable[[Any], Awaitable[None]]) -> Outcome:
        """Call ``handler(item)`` under the policy; what happened. Never raises the handler's error."""
        if self.ordered or isinstance(item, Record):
            if not self.ordered:
                raise ConfigError("a Record has no nack: retry records with RetryPolicy(mode='ordered')")
            return await self._in_place(item, handler)
        try:
            await handler(item)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            return await self.failed(item, exc)
        self._succeeded(item)
        return "handled"

    async def handle_batch(self, batch: list[Message], handler: Callable[[Any], Awaitable[None]]) -> None:
        """Call a batch handler; on failure each unsettled message goes through :meth:`failed`."""
        try:
            await handler(batch)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.warning("batch handler failed: %r", exc)
            for message in batch:
                if not message.settled:
                    await self.failed(message, exc)
            return
        self.counts["handled"] += 1

    async def failed(self, message: Message, error: BaseException) -> Outcome:
        """Settle ``message`` after its handler raised ``error``: nack with backoff, or dead-letter."""
        if message.settled:
            return "settled"
        attempt, first = self._failures.record(message, self._now())
        await self._trip(error)
        if self._gives_up(error, attempt):
            if await self._dead_letter(message, error, attempt, first):
                return "dead-lettered"
        delay = self.policy.backoff.delay(attempt)
        log.warning(
            "handler failed on message %s (attempt %d): %r; redelivery in %.2fs",
            message.id,
            attempt,
            error,
            delay,
        )
        try:
            await message.nack(delay)
        except Exception as exc:  # the broker redelivers after the ack deadline anyway
            log.warning("could not nack message %s: %r", message.id, exc)
        self.counts["retrying"] += 1
        return "retrying"

    # -- internals ------------------------------------------------------------------------
    def _succeeded(self, item: Message | Record) -> None:
        self.counts["handled"] += 1
        if isinstance(item, Message):
            self._failures.forget(item)

    async def dead_letter(self, item: Message | Record, error: BaseException) -> bool:
        """Dead-letter ``item`` at once because of ``error``, as the policy dead-letters (the
        :class:`DeadLetterTopic` with the ``x-dead-letter-*`` attributes, or natively); False when
        it could not be (the item is then left unsettled, never lost)."""
        attempt = (item.delivery_attempt or 1) if isinstance(item, Message) else 1
        return await self._dead_letter(item, error, attempt, self._now())

    def _gives_up(self, error: BaseException, attempt: int) -> bool:
        policy = self.policy
        if policy.non_retryable and isinstance(error, policy.non_retryable):
            return True
        if isinstance(error, DecodeError) and policy.dead_letter is not None:
            return True
        return policy.max_attempts is not None and attempt >= policy.max_attempts

    async def _trip(self, error: BaseException) -> None:
        if self._breaker is None:
            return
        event = self._breaker.record(error)
        if event is None:
            return
        self.counts["paused"] += 1
        log.warning(
            "%d handler failures within %ss: pausing consumption for %ss",
            event.failures,
            event.threshold.window,
            event.cooldown,
        )
        callback = self.policy.on_threshold
        if callback is None:
            return
        try:
            result = callback(event)
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("on_threshold callback failed")

    async def _in_place(self, item: Message | Record, handler: Callable[[Any], Awaitable[None]]) -> Outcome:
        attempt = (item.delivery_attempt or 1) if isinstance(item, Message) else 1
        first: float | None = None
        while True:
            try:
                await handler(item)
            except asyncio.CancelledError:
                raise
            except Exception as exc:
                if isinstance(item, Message) and item.settled:
                    return "settled"
                now = self._now()
                first = now if first is None else first
                await self._trip(exc)
                if self._gives_up(exc, attempt):
                    if await self._dead_letter(item, exc, attempt, first):
                        return "dead-lettered"
                    if isinstance(item, Message):  # could not dead-letter: let the broker retry
                        return await self.failed(item, exc)
                self.counts["retrying"] += 1
                if isinstance(item, Message):
                    try:
                        await item.in_progress()  # keep it ours while we wait
                    except Exception:  # optional: not every broker extends deadlines
                        pass
                delay = self.policy.backoff.delay(attempt)
                log.warning(
                    "handler failed (attempt %d): %r; retrying in place in %.2fs", attempt, exc, delay
                )
                await asyncio.sleep(delay)
                attempt += 1
                continue
            self._succeeded(item)
            return "handled"

    def _reason(self, error: BaseException, attempt: int) -> str:
        if isinstance(error, DecodeError) or (
            self.policy.non_retryable and isinstance(error, self.policy.non_retryable)
        ):
            return f"non-retryable {type(error).__name__}"
        return f"failed {attempt} attempts (max_attempts={self.policy.max_attempts})"

    async def _dead_letter(
        self, item: Message | Record, error: BaseException, attempt: int, first: float
    ) -> bool:
        """Dead-letter ``item``; False if it could not be (it is then retried, never lost)."""
        reason = self._reason(error, attempt)
        log.error("dead-lettering %r: %s", item, reason, exc_info=error)
        if self._dead_topic is None:  # native
            if not isinstance(item, Message):
                log.error("records have no native dead-letter: use a DeadLetterTopic; retrying")
                return False
            try:
                await item.dead_letter(f"{reason}: {type(error).__name__}: {error}"[:1024])
            except NotSupported:
                log.error("this backend cannot dead-letter message %s natively; nacking it", item.id)
                return False
            except Exception as exc:
                log.warning("could not dead-letter message %s: %r", item.id, exc)
                return False
        else:
            dead = self.policy.dead_letter
            assert isinstance(dead, DeadLetterTopic)
            text = str(error)[: dead.max_error_length]
            why = {
                ATTR_REASON: reason,
                ATTR_ERROR_TYPE: f"{type(error).__module__}.{type(error).__qualname__}",
                ATTR_ERROR: text,
                ATTR_ATTEMPTS: str(attempt),
                ATTR_FIRST_FAILURE: _iso(first),
                ATTR_LAST_FAILURE: _iso(self._now()),
            }
            if isinstance(item, Message):
                why[ATTR_MESSAGE_ID] = item.id
                data, topic = item.data, self.topic
            else:
                why[ATTR_MESSAGE_ID] = f"{item.topic}/{item.partition}/{item.offset}"
                data, topic = item.value or b"", item.topic
            if topic is not None:
                why[ATTR_TOPIC] = topic
            if self.subscription is not None:
                why[ATTR_SUBSCRIPTION] = self.subscription
            letter = OutboundMessage(data, key=item.key, attributes={**item.attributes, **why})
            try:
                await self._dead_topic.publish(letter)  # first publish: never lose ...
            except Exception as exc:
                log.warning("could not publish message to dead-letter topic %s: %r", dead.name, exc)
                return False
            try:
                await item.ack()  # ... then ack (a failure here redelivers: at-least-once)
            except Exception as exc:
                log.warning("dead-lettered a copy of %r but could not ack it: %r", item, exc)
        if isinstance(item, Message):
            self._failures.forget(item)
        self.counts["dead-lettered"] += 1
        return True
