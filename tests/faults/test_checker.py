"""The checker itself: counts on hand-made runs, and a mutation run it must fail."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

import broker
from broker.errors import ConnectionFailed, Timeout
from tests.faults.workload import (
    Delivery,
    Outcome,
    Report,
    check,
    consume,
    message_id,
    publish_at_rate,
    read_confirmed,
)


def test_counts_lost_duplicates_phantoms_and_recovery() -> None:
    outcome = Outcome(
        published=["a", "b", "c", "d", "e"],
        indeterminate=["d"],
        failed=["e"],
        deliveries=[Delivery("a", 1.0), Delivery("a", 5.0), Delivery("c", 7.5), Delivery("x", 8.0)],
        errors=[Timeout("t"), ConnectionFailed("gone"), KeyError("k")],
    )
    report = check(["a", "b", "c"], outcome, fault_end=6.0)
    assert report.confirmed == 3
    assert report.delivered == 3  # a, c, x
    assert report.lost == ("b",)
    assert report.duplicates == 1
    assert (report.indeterminate, report.failed) == (1, 1)
    assert report.phantoms == ("x",)
    assert report.errors == {"Timeout": 1, "ConnectionFailed": 1, "KeyError": 1}
    assert len(report.foreign_errors) == 1 and "KeyError" in report.foreign_errors[0]
    assert report.recovery == pytest.approx(1.5)
    assert report.recovered
    assert report.caught_up is None  # b was lost
    problems = report.problems()
    assert len(problems) == 3 and not report.ok


def test_a_clean_run_passes_and_no_delivery_after_the_fault_fails() -> None:
    outcome = Outcome(published=["a", "b"], deliveries=[Delivery("a", 1.0), Delivery("b", 2.0)])
    assert check(["a", "b"], outcome, fault_end=None).ok
    assert check(["a", "b"], outcome, fault_end=1.5).caught_up == pytest.approx(0.5)
    late = check(["a", "b"], outcome, fault_end=3.0)
    assert not late.recovered and late.recovery is None
    assert late.problems() == ["no message was delivered after the fault ended"]


def test_per_key_order_is_checked_on_what_was_published_after_the_fault() -> None:
    ids = [message_id("r", i) for i in range(12)]  # keys k0..k3: 0,4,8 / 1,5,9 / 2,6,10 / 3,7,11
    started = {mid: float(i) for i, mid in enumerate(ids)}
    in_order = [Delivery(mid, 20.0 + i) for i, mid in enumerate(ids)]
    swapped = list(in_order)
    swapped[5], swapped[9] = Delivery(ids[9], 25.0), Delivery(ids[5], 29.0)  # k1: 9 before 5

    def judge(deliveries: list[Delivery], order_from: float | None = 3.0) -> Report:
        outcome = Outcome(published=ids, deliveries=deliveries, started=started)
        return check(ids, outcome, fault_end=1.0, order_from=order_from)

    kept = judge(in_order)
    assert kept.order_violations == () and kept.ok and kept.order_summary() == "kept"
    broken = judge(swapped)
    assert broken.order_violations == (("k1", ids[5], ids[9]),)
    assert not broken.ok and "key k1: r-000009 was delivered before r-000005" in broken.problems()[0]
    # Published before order_from (still being retried after the fault): not judged.
    assert judge(swapped, order_from=6.0).ok
    # A redelivery of an earlier message after later ones is not an order break: first deliveries count.
    assert judge([*in_order, Delivery(ids[4], 40.0)]).ok
    # Not claimed: not checked.
    assert judge(swapped, order_from=None).order_violations is None


def test_confirmed_ids_come_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "confirmed.txt"
    assert read_confirmed(path) == []
    path.write_text("r-1\nr-2\n\n")
    assert read_confirmed(path) == ["r-1", "r-2"]


async def _workload(tmp_path: Path, drop: str | None) -> tuple[list[str], Outcome]:
    """200 messages through the in-memory backend's portable API with the real workload code."""
    outcome = Outcome()
    stop, ready = asyncio.Event(), asyncio.Event()
    confirmed_file = tmp_path / f"confirmed-{drop}.txt"
    async with broker.connect(f"inmem://faults-checker-{drop}") as backend:
        consumer = asyncio.ensure_future(
            consume(backend, "t", "s", outcome, stop, ready, drop=lambda mid: mid == drop)
        )
        await asyncio.wait_for(ready.wait(), 10)
        await publish_at_rate(backend, "t", "run", 200, 2000.0, confirmed_file, outcome)
        confirmed = read_confirmed(confirmed_file)
        expected = len(confirmed) - (drop is not None)
        for _ in range(500):  # 10 s at most
            if len({d.id for d in outcome.deliveries}) >= expected:
                break
            await asyncio.sleep(0.02)
        await asyncio.sleep(0.2)
        stop.set()
        await consumer
    return confirmed, outcome


async def test_the_real_workload_passes_the_checker(tmp_path: Path) -> None:
    confirmed, outcome = await _workload(tmp_path, drop=None)
    report = check(confirmed, outcome, fault_end=None)
    assert report.confirmed == 200 and report.delivered == 200, report.summary()
    assert report.ok, report.problems()


async def test_mutation_a_receiver_that_drops_one_confirmed_id_fails_the_checker(tmp_path: Path) -> None:
    dropped = message_id("run", 137)
    confirmed, outcome = await _workload(tmp_path, drop=dropped)
    assert dropped in confirmed
    report = check(confirmed, outcome, fault_end=None)
    assert report.lost == (dropped,), report.summary()
    assert not report.ok
    assert report.problems()[0].startswith("1 confirmed messages never delivered")
