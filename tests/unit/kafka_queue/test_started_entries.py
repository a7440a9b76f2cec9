"""``Started`` (a MarkersQueue entry) is a slotted record compared and hashed by identity."""

from __future__ import annotations

import pytest

from broker.backends.kafka.queue import Started


def test_started_defaults_and_repr() -> None:
    entry = Started("q", 3, [(10, 12)], 5.0, 42, None)
    assert entry.handed is True
    assert entry.left == 0
    assert repr(entry) == "<Started 'q' p3 [(10, 12)] left=0 handed=True deadline=5.0 at=42>"
    prefetched = Started("q", 3, [(10, 12)], 5.0, 42, None, False)
    assert prefetched.handed is False


def test_started_entries_are_distinct_keys_even_when_alike() -> None:
    first = Started("q", 0, [(1, 1)], 1.0, 7, None)
    second = Started("q", 0, [(1, 1)], 1.0, 7, None)
    assert first != second
    groups = {first: [1], second: [1]}
    assert len(groups) == 2
    first.deadline = 2.0  # mutable: a KEEPALIVE moves the deadline in place
    assert groups[first] == [1]


def test_started_has_no_instance_dict() -> None:
    entry = Started("q", 0, [(1, 1)], 1.0, 7, None)
    with pytest.raises(AttributeError):
        entry.other = 1  # type: ignore[attr-defined]
    with pytest.raises(TypeError):
        Started("q", 0, [(1, 1)], 1.0, 7, None, True, 5)  # type: ignore[call-arg]
