"""The backlog of a JetStream durable consumer (:class:`broker.backend.Backlog`).

A subscription (and a ``records()`` group) is a durable pull consumer; the server reports its
``num_pending`` (stream messages matching its filter not delivered yet) and ``num_ack_pending``
(delivered, not acked yet). Their sum is the backlog.
"""

from __future__ import annotations

import nats.js.errors

from broker.backends.jetstream.connection import Connection
from broker.backends.jetstream.errors import translate
from broker.backends.jetstream.settings import check_name, check_subject
from broker.errors import UnknownTopic

__all__ = ["consumer_backlog"]

#: JetStream API error codes: stream not found, consumer not found.
_NOT_FOUND = (10059, 10014)


def _not_found(exc: BaseException) -> bool:
    return isinstance(exc, nats.js.errors.NotFoundError) or (
        isinstance(exc, nats.js.errors.APIError) and exc.err_code in _NOT_FOUND
    )


async def consumer_backlog(connection: Connection, topic: str, consumer: str, stream: str | None) -> int:
    """``num_pending + num_ack_pending`` of durable ``consumer`` of the stream storing ``topic``.

    ``stream``: the stream to look in (None: the stream whose subjects cover ``topic``). Creates
    nothing; raises ``UnknownTopic`` when the stream or the consumer does not exist.
    """
    check_subject(topic)
    check_name(consumer, "consumer")
    await connection.client()
    jsm = connection.jsm
    assert jsm is not None
    doing = f"reading the backlog of JetStream consumer {consumer!r} of {topic!r}"
    try:
        name = stream or await jsm.find_stream_name_by_subject(topic)
        info = await jsm.consumer_info(name, consumer)
    except Exception as exc:
        if _not_found(exc):
            raise UnknownTopic(f"{doing}: no such stream or consumer") from exc
        raise translate(exc, doing) from exc
    return int(info.num_pending or 0) + int(info.num_ack_pending or 0)
