"""The backlog of a Kafka consumer group on a topic (:class:`broker.backend.Backlog`).

The backlog is the lag of kefka's ``LagForTopicPartition`` summed over the topic's partitions:
the high watermark minus the group's committed offset (``high - low`` where the group committed
nothing; see :func:`broker.backends.kafka.client.metadata.lag_from`). ``records()`` consumers commit on
``Record.ack()``, so their backlog is what is not acked yet. The marker queue of ``messages()``
commits the queue topic when a fetched batch is STARTed, so its backlog is what no consumer of
the subscription fetched yet: messages in flight are not counted. Redelivered copies are written
back to the topic, so they count again until fetched.
"""

from __future__ import annotations

from broker.backends.kafka.admin import KafkaAdmin
from broker.backends.kafka.client.metadata import lag_from
from broker.log import TopicPartition

__all__ = ["group_backlog"]


async def group_backlog(admin: KafkaAdmin, topic: str, group: str) -> int:
    """The sum over ``topic``'s partitions of its high watermark minus ``group``'s committed offset.

    Raises ``UnknownTopic`` when the topic does not exist.
    """
    count = await admin.partitions(topic)
    partitions = [TopicPartition(topic, p) for p in range(count)]
    watermarks = await admin.watermarks_many(partitions)
    committed = await admin.committed(group, partitions)
    return sum(lag_from(*watermarks[tp], committed.get(tp)) for tp in partitions)
