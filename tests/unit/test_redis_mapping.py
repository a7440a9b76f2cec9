"""The messages of a raw ``XREADGROUP`` reply, decoded on first read, equal those decoded up front."""

from __future__ import annotations

from typing import Any, cast

import pytest

from broker.backends.redis.mapping import Entry, read_messages, to_message
from broker.driver.acking import Acker

ACKER = cast(Acker, object())


@pytest.mark.parametrize(
    "pairs",
    [
        [b"data", b"payload"],
        [b"data", b"payload", b"key", b"k1", b"attr:source", b"bench"],
        [b"customer", b"7", b"data", b"first", b"attr:customer", b"8", b"data", b"last"],  # raw XADD
        [b"key", b"k\xff"],  # no data; a value that is not UTF-8
        None,  # an entry deleted meanwhile
    ],
)
def test_a_message_read_from_the_reply_equals_the_one_decoded_up_front(pairs: list[bytes] | None) -> None:
    (lazy,) = read_messages("orders", [[b"1700000000123-4", pairs]], ACKER, 5.0, 30.0, 40.0)
    fields = {} if pairs is None else dict(zip(pairs[::2], pairs[1::2], strict=True))
    eager = to_message("orders", b"1700000000123-4", fields, ACKER, 5.0, 1)
    names = ("id", "data", "key", "attributes", "publish_time", "ingestion_time", "delivery_attempt")
    assert [getattr(lazy, name) for name in names] == [getattr(eager, name) for name in names]
    assert lazy.raw == Entry("orders", "1700000000123-4", fields)
    assert lazy.state == "pending" and lazy.acker is ACKER
    lazy.delivery_attempt = 3  # the lazily decoded fields stay settable
    assert cast(Any, lazy).delivery_attempt == 3
