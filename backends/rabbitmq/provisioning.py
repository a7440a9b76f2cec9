"""``provision`` on RabbitMQ: which exchanges and queues exist, asked without creating any.

Under ``provision="verify"`` the backend declares nothing with creation: it asks the broker about
each exchange and queue it would use with a *passive* declare (``exchange.declare`` /
``queue.declare`` with ``passive=true``), which needs no permission at all and creates nothing.
A passive declare of a missing entity is answered by closing the channel (``404 NOT_FOUND``), so
every question goes on a throwaway channel of its own, never on a publisher's or consumer's.
What is missing is named in a :class:`~broker.errors.ProvisioningError`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable
from typing import Literal

import aio_pika.exceptions as amqp
from aio_pika.abc import AbstractChannel

from broker.backends.rabbitmq.mapping import close_quietly, translate

__all__ = ["Entity", "describe", "missing_entities"]

#: An exchange or a queue, by kind and name.
Entity = tuple[Literal["exchange", "queue"], str]


def describe(entity: Entity) -> str:
    """``entity`` for a person: ``"exchange 'orders'"``, ``"queue 'orders.billing'"``."""
    kind, name = entity
    return f"{kind} {name!r}"


async def missing_entities(
    channel: Callable[[], Awaitable[AbstractChannel]], entities: Iterable[Entity], close_timeout: float
) -> list[str]:
    """The ones of ``entities`` that do not exist, described (:func:`describe`), in order.

    Each is asked with a passive declare on a new channel from ``channel()``, closed after (the
    broker closes it itself when the answer is "not found"). Any other failure (the connection,
    a refused vhost) raises its typed error: only a missing entity is an answer.
    """
    missing: list[str] = []
    for entity in dict.fromkeys(entities):  # each once, in order
        kind, name = entity
        opened = await channel()
        try:
            if kind == "exchange":
                await opened.declare_exchange(name, passive=True)
            else:
                await opened.declare_queue(name, passive=True)
        except amqp.ChannelNotFoundEntity:
            missing.append(describe(entity))
        except Exception as exc:
            raise translate(exc, f"verifying {describe(entity)}") from exc
        finally:
            await close_quietly(opened, close_timeout)
    return missing
