"""The fault workload through the portable API only, and the checker that judges a run.

* :func:`publish_at_rate` publishes ``count`` messages at a fixed rate through a publisher wrapped
  with :func:`~broker.publish_retry.retrying_publish`. Each id is appended to the confirmed file
  and flushed as soon as ``publish()`` returned; a publish that timed out is *indeterminate*, one
  that failed otherwise is *failed*; neither is confirmed.
* :func:`consume` pulls with ``Backend.messages``, acks every message and records each delivery.
* :func:`check` compares the confirmed file with the deliveries: lost (confirmed, never delivered),
  duplicates, phantoms (delivered, never published), every error the application saw (each must be
  a :mod:`broker.errors` class), the recovery time (fault end to the first delivery after it) and,
  on backends that claim ``per_key_order``, the order per key of what was published after the fault.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.backend import Backend
from broker.errors import BrokerError, Timeout
from broker.message import Message, OutboundMessage
from broker.publish_retry import retrying_publish

__all__ = ["Delivery", "Outcome", "Report", "check", "consume", "publish_at_rate", "read_confirmed"]


@dataclass(frozen=True, slots=True)
class Delivery:
    """One message handed to the application: its id and when (``time.monotonic()``)."""

    id: str
    at: float


@dataclass
class Outcome:
    """What one side of the workload saw."""

    #: Ids published (attempted), in order.
    published: list[str] = field(default_factory=list)
    #: Ids whose publish timed out: the broker may or may not have them.
    indeterminate: list[str] = field(default_factory=list)
    #: Ids whose publish failed with another error (after the retries).
    failed: list[str] = field(default_factory=list)
    #: Every delivery, redeliveries included.
    deliveries: list[Delivery] = field(default_factory=list)
    #: Every exception the application saw, in order.
    errors: list[BaseException] = field(default_factory=list)
    #: Id -> when its publish started (``time.monotonic()``).
    started: dict[str, float] = field(default_factory=dict)


#: How many keys the workload spreads its messages over (message ``i`` has key ``k{i % KEYS}``).
KEYS = 4


def message_id(run: str, i: int) -> str:
    """The id of the ``i``-th message of run ``run``."""
    return f"{run}-{i:06d}"


def sequence_of(mid: str) -> int:
    """The ``i`` of :func:`message_id` (its key is ``k{i % KEYS}``)."""
    return int(mid.rsplit("-", 1)[1])


async def publish_at_rate(
    backend: Backend,
    topic: str,
    run: str,
    count: int,
    rate: float,
    confirmed_file: Path,
    outcome: Outcome,
    *,
    publish_timeout: float = 5.0,
    max_in_flight: int = 100,
    max_attempts: int = 10,
    batch: int = 1,
) -> None:
    """Publish ``count`` messages at ``rate`` per second (at most ``max_in_flight`` unconfirmed calls).

    A confirmed id is appended to ``confirmed_file`` and flushed right after ``publish()`` returns.
    With ``batch > 1`` the messages go in ``batch_publish`` calls of ``batch`` messages each.
    """
    publisher = backend.publisher()
    publisher.wrap_send(retrying_publish(max_attempts=max_attempts))
    handle = publisher.topic(topic)
    slots = asyncio.Semaphore(max_in_flight)
    with confirmed_file.open("a", encoding="ascii") as confirmed:

        async def send(first: int, last: int) -> None:
            ids = [message_id(run, i) for i in range(first, last)]
            messages = [
                OutboundMessage(m.encode(), key=f"k{i % KEYS}")
                for i, m in zip(range(first, last), ids, strict=True)
            ]
            try:
                if len(messages) == 1:
                    await handle.publish(messages[0], timeout=publish_timeout)
                else:
                    await handle.batch_publish(*messages, timeout=publish_timeout)
            except Timeout as exc:
                outcome.indeterminate.extend(ids)
                outcome.errors.append(exc)
            except Exception as exc:  # recorded: the checker fails on anything not from broker.errors
                outcome.failed.extend(ids)
                outcome.errors.append(exc)
            else:
                confirmed.write("".join(m + "\n" for m in ids))
                confirmed.flush()
            finally:
                slots.release()

        started = time.monotonic()
        tasks = []
        for first in range(0, count, batch):
            await asyncio.sleep(max(0.0, started + first / rate - time.monotonic()))
            await slots.acquire()
            now = time.monotonic()
            for i in range(first, min(first + batch, count)):
                outcome.published.append(message_id(run, i))
                outcome.started[message_id(run, i)] = now
            tasks.append(asyncio.ensure_future(send(first, min(first + batch, count))))
        await asyncio.gather(*tasks)
    await publisher.close()


async def consume(
    backend: Backend,
    topic: str,
    subscription: str,
    outcome: Outcome,
    stop: asyncio.Event,
    ready: asyncio.Event,
    *,
    drop: Callable[[str], bool] = lambda mid: False,
    **options: Any,
) -> None:
    """Pull, ack and record every message of ``subscription`` until ``stop`` is set.

    ``drop`` is for the checker's own mutation test: a message it names is acked but not recorded,
    as a buggy receiver would lose it.
    """
    async with backend.messages(topic, subscription, **options) as consumer:
        ready.set()
        while not stop.is_set():
            try:
                message: Message = await consumer.next_message(timeout=0.5)
            except Timeout:
                continue
            except Exception as exc:
                outcome.errors.append(exc)
                await asyncio.sleep(0.2)
                continue
            mid = bytes(message.data).decode()
            try:
                await message.ack()
            except Exception as exc:  # a failed ack means a redelivery, not a loss
                outcome.errors.append(exc)
            if not drop(mid):
                outcome.deliveries.append(Delivery(mid, time.monotonic()))


def read_confirmed(path: Path) -> list[str]:
    """The confirmed ids written to ``path`` (one per line)."""
    if not path.exists():
        return []
    return [line for line in path.read_text(encoding="ascii").splitlines() if line]


@dataclass(frozen=True)
class Report:
    """The checker's verdict on one run."""

    confirmed: int
    delivered: int
    lost: tuple[str, ...]
    duplicates: int
    indeterminate: int
    failed: int
    phantoms: tuple[str, ...]
    #: Error class name -> count, for every error the application saw.
    errors: dict[str, int]
    #: Errors that are not broker.errors classes (each one fails the run).
    foreign_errors: tuple[str, ...]
    #: Seconds from the end of the fault to the first delivery after it (None: none came).
    recovery: float | None
    #: False when a fault ended and no delivery came after it.
    recovered: bool
    #: Seconds from the end of the fault until every confirmed id had been delivered (None: no fault,
    #: or some never came).
    caught_up: float | None = None
    #: ``(key, earlier id, later id)`` where, among the confirmed messages published after the fault
    #: (plus a settling time), a later one of a key was first delivered before an earlier one.
    #: Checked only on backends that claim ``per_key_order`` (None: not checked).
    order_violations: tuple[tuple[str, str, str], ...] | None = None

    @property
    def ok(self) -> bool:
        """Nothing confirmed was lost, nothing unknown came, every error was typed, and it recovered."""
        return not self.problems()

    def problems(self) -> list[str]:
        """What is wrong with the run, one sentence each (empty when it passed)."""
        out = []
        if self.lost:
            out.append(f"{len(self.lost)} confirmed messages never delivered: {list(self.lost[:10])}")
        if self.phantoms:
            out.append(f"{len(self.phantoms)} delivered ids were never published: {list(self.phantoms[:10])}")
        if self.foreign_errors:
            out.append(f"errors outside broker.errors: {list(self.foreign_errors[:10])}")
        if not self.recovered:
            out.append("no message was delivered after the fault ended")
        if self.order_violations:
            key, earlier, later = self.order_violations[0]
            out.append(
                f"per-key order broken after the fault ({len(self.order_violations)} times): "
                f"key {key}: {later} was delivered before {earlier}"
            )
        return out

    def summary(self) -> str:
        """One line with the counts."""
        recovery = "-" if self.recovery is None else f"{self.recovery:.2f}s"
        caught_up = "-" if self.caught_up is None else f"{self.caught_up:.2f}s"
        return (
            f"confirmed={self.confirmed} delivered={self.delivered} lost={len(self.lost)} "
            f"duplicates={self.duplicates} indeterminate={self.indeterminate} failed={self.failed} "
            f"phantoms={len(self.phantoms)} recovery={recovery} caught_up={caught_up} "
            f"order={self.order_summary()} errors={self.errors or {}}"
        )

    def order_summary(self) -> str:
        """``kept``, ``N broken`` or ``-`` (not claimed, not checked)."""
        if self.order_violations is None:
            return "-"
        return f"{len(self.order_violations)} broken" if self.order_violations else "kept"


def check(
    confirmed: Iterable[str],
    outcome: Outcome,
    *,
    fault_end: float | None,
    order_from: float | None = None,
) -> Report:
    """Judge a run: ``confirmed`` ids (from the confirmed file) against what ``outcome`` recorded.

    ``order_from`` (a ``time.monotonic()``) checks per-key order: the confirmed messages whose
    publish started then or later must be first delivered in publish order within each key.
    """
    confirmed_ids = list(dict.fromkeys(confirmed))
    seen = Counter(d.id for d in outcome.deliveries)
    published = set(outcome.published)
    lost = tuple(i for i in confirmed_ids if i not in seen)
    phantoms = tuple(sorted(i for i in seen if i not in published))
    errors = Counter(type(e).__name__ for e in outcome.errors)
    foreign = tuple(
        f"{type(e).__module__}.{type(e).__qualname__}: {e}"
        for e in outcome.errors
        if not isinstance(e, BrokerError)
    )
    recovery = caught_up = None
    if fault_end is not None:
        after = [d.at for d in outcome.deliveries if d.at >= fault_end]
        if after:
            recovery = max(0.0, min(after) - fault_end)
        first: dict[str, float] = {}
        for d in outcome.deliveries:
            first.setdefault(d.id, d.at)
        if confirmed_ids and not lost:
            caught_up = max(0.0, max(first[i] for i in confirmed_ids) - fault_end)
    violations = None if order_from is None else _order_violations(confirmed_ids, outcome, order_from)
    return Report(
        confirmed=len(confirmed_ids),
        delivered=len(seen),
        lost=lost,
        duplicates=sum(n - 1 for n in seen.values()),
        indeterminate=len(outcome.indeterminate),
        failed=len(outcome.failed),
        phantoms=phantoms,
        errors=dict(errors),
        foreign_errors=foreign,
        recovery=recovery,
        recovered=fault_end is None or recovery is not None,
        caught_up=caught_up,
        order_violations=violations,
    )


def _order_violations(
    confirmed_ids: list[str], outcome: Outcome, order_from: float
) -> tuple[tuple[str, str, str], ...]:
    after = {i for i in confirmed_ids if outcome.started.get(i, -1.0) >= order_from}
    first: dict[str, None] = {}
    for d in outcome.deliveries:
        if d.id in after:
            first.setdefault(d.id)
    last_of_key: dict[str, str] = {}
    violations = []
    for mid in first:  # first deliveries, in delivery order
        key = f"k{sequence_of(mid) % KEYS}"
        previous = last_of_key.get(key)
        if previous is not None and sequence_of(previous) > sequence_of(mid):
            violations.append((key, mid, previous))
        else:
            last_of_key[key] = mid
    return tuple(violations)
