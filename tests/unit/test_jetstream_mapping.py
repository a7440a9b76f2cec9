"""Delivered JetStream messages: metadata parsed lazily from the ``$JS.ACK`` reply subject.

nats-py's ``Msg`` is a plain data class, built here as the client builds it on delivery; no
server is involved in what these tests check (how a reply subject reads as message fields).
"""

from __future__ import annotations

import pytest
from nats.aio.msg import Msg

from broker.backends.jetstream.mapping import KEY_HEADER, to_messages
from broker.driver.acking import Acker
from broker.errors import ReceiveError

ACKER: Acker = object()  # type: ignore[assignment]  # never called: nothing is settled here


def delivery(reply: str, headers: dict[str, str] | None = None) -> Msg:
    return Msg(None, subject="orders", reply=reply, data=b"payload", headers=headers)  # type: ignore[arg-type]


def test_fields_of_the_short_reply_subject() -> None:
    # $JS.ACK.<stream>.<consumer>.<delivered>.<stream seq>.<consumer seq>.<ns>.<pending>
    (message,) = to_messages([delivery("$JS.ACK.ORDERS.worker.3.42.40.1700000000123456789.7")], ACKER, 5.0)
    assert message.data == b"payload"
    assert (message.id, message.delivery_attempt) == ("42", 3)
    assert message.publish_time == pytest.approx(1700000000.123456789)
    assert (message.key, dict(message.attributes), message.ingestion_time) == (None, {}, 5.0)


def test_fields_of_the_domain_reply_subject() -> None:
    # $JS.ACK.<domain>.<account hash>.<stream>.<consumer>.<delivered>.<sseq>.<cseq>.<ns>.<pending>.<token>
    reply = "$JS.ACK.hub.ABCDEF.ORDERS.worker.2.99.98.1700000001000000000.0.xyz"
    (message,) = to_messages([delivery(reply, {KEY_HEADER: "k1", "source": "x"})], ACKER, 0.0)
    assert (message.id, message.delivery_attempt, message.publish_time) == ("99", 2, 1700000001.0)
    assert (message.key, dict(message.attributes)) == ("k1", {"source": "x"})


def test_fields_read_later_are_the_same_and_stick() -> None:
    (message,) = to_messages([delivery("$JS.ACK.S.c.1.7.7.1000000000.0")], ACKER, 0.0)
    assert message.id == "7" and message.id == "7"
    message.delivery_attempt = 9  # assignable like any Message field
    assert message.delivery_attempt == 9


@pytest.mark.parametrize(
    "reply", ["_INBOX.abc.def", "$JS.ACK.S.c.1.7", "$JS.NAK.S.c.1.7.7.1000000000.0", "x.y.z.a.b.c.d.e.f"]
)
def test_a_reply_that_is_no_jetstream_delivery_is_a_receive_error(reply: str) -> None:
    with pytest.raises(ReceiveError, match="not a JetStream delivery"):
        to_messages([delivery(reply)], ACKER, 0.0)
