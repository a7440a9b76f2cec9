"""The backlog of a RabbitMQ subscription's queue (:class:`broker.backend.Backlog`).

A subscription is the quorum queue ``<topic>.<subscription>``; a passive ``queue.declare``
answers with its ``message_count``: the messages ready for delivery. Messages delivered and not
acked yet are not in it (AMQP 0-9-1 does not report them; the management plugin's HTTP API does,
and is not used), nor are those a consumer holds back for a delayed nack.
"""

from __future__ import annotations

from broker.backends.rabbitmq.connection import RabbitmqConnection, close_quietly
from broker.backends.rabbitmq.errors import translate
from broker.backends.rabbitmq.settings import queue_name

__all__ = ["queue_backlog"]


async def queue_backlog(connection: RabbitmqConnection, topic: str, subscription: str) -> int:
    """The ready messages of the queue of ``subscription`` (``UnknownTopic`` when it does not exist).

    Declares nothing: a passive declare on a channel of its own (a missing queue closes it).
    """
    name = queue_name(topic, subscription)
    channel = await connection.channel()
    try:
        queue = await channel.declare_queue(name, passive=True)
        count = queue.declaration_result.message_count
    except Exception as exc:
        raise translate(exc, f"reading the backlog of queue {name!r}") from exc
    finally:
        await close_quietly(channel, connection.settings.close_timeout)
    return int(count or 0)
