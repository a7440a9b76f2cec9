"""The backlog of an in-memory subscription or consumer group (:class:`broker.backend.Backlog`)."""

from __future__ import annotations

from broker.backends.inmem.store import InmemBroker
from broker.errors import UnknownTopic

__all__ = ["backlog"]


def backlog(broker: InmemBroker, topic: str, subscription: str) -> int:
    """Messages of ``subscription`` (a queue subscription, else a ``records()`` group) not yet acked.

    A queue subscription counts what it has not delivered yet, what waits for redelivery (now or
    after a nack's delay) and what is in flight (delivered, not settled, lease not expired; a
    lease that lapsed is expired first, so its messages count as waiting for redelivery). A
    consumer group counts, per partition, the records after its committed offset (all retained
    records where it committed nothing). Raises ``UnknownTopic`` for an unknown topic or name.
    """
    state = broker.topics.get(topic)
    if state is None:
        raise UnknownTopic(f"the in-memory broker has no topic {topic!r}")
    queue = state.subscriptions.get(subscription)
    if queue is not None:
        queue.expire()  # a lapsed lease waits for redelivery now, whether or not a consumer polls
        undelivered = sum(
            max(0, part.high - max(cursor, part.base))
            for part, cursor in zip(state.partitions, queue.cursors, strict=True)
        )
        return undelivered + len(queue.ready) + len(queue.delayed) + queue.in_flight
    group = broker.groups.get(subscription)
    if group is None:
        raise UnknownTopic(f"topic {topic!r} has no subscription or consumer group {subscription!r}")
    total = 0
    for number, part in enumerate(state.partitions):
        committed = group.committed.get(state.tp(number))
        start = part.base if committed is None else max(committed, part.base)
        total += max(0, part.high - start)
    return total
