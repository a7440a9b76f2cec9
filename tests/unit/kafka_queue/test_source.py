"""Sources of queue messages: the offset ranges they give markers, and their message classes."""

from __future__ import annotations

import dataclasses
import random
from operator import itemgetter
from typing import Any

from broker.backends.kafka.queue.markers import ranges_of, ranges_reader
from broker.backends.kafka.queue.source import _raw_class
from broker.log import RawFields


def test_ranges_reader_gives_what_ranges_of_gives() -> None:
    ranges = ranges_reader(itemgetter(0), itemgetter(1))
    rng = random.Random(7)
    cases: list[list[tuple[int, int]]] = [[], [(0, 5)], [(1, 3), (1, 4), (1, 5)], [(2, 9), (2, 7), (2, 8)]]
    for _ in range(300):
        partitions = rng.randint(1, 3)
        base = rng.randint(0, 50)
        cases.append(
            [(rng.randrange(partitions), base + rng.randint(0, 12)) for _ in range(rng.randint(1, 12))]
        )
    for ids in cases:
        distinct = list(dict.fromkeys(ids))  # sources give distinct records
        assert ranges(distinct) == ranges_of(distinct), distinct


def _fields() -> RawFields:
    def read(raw: Any) -> Any:
        return raw

    return RawFields(
        topic=read,
        partition=read,
        offset=read,
        value=read,
        key_bytes=read,
        key=read,
        has_attributes=read,
        attributes=read,
        publish_time=read,
    )


def test_raw_message_classes_are_made_once_per_fields_and_mode() -> None:
    fields = _fields()
    queue = _raw_class(fields, "queue")
    assert _raw_class(dataclasses.replace(fields), "queue") is queue, "equal fields share the class"
    assert _raw_class(fields, "topic") is not queue
    assert _raw_class(_fields(), "queue") is not queue, "other readers get a class of their own"
