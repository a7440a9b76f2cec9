"""Publishing to RabbitMQ: the publish driver under :mod:`broker.publishing`.

Every topic is a durable exchange, declared on its first publish (publishing to a topic nobody
subscribed to yet succeeds; the broker drops what no queue is bound to). The channel runs in
publisher-confirm mode: ``send`` returns once the broker confirmed every message. A batch is
written in one go and its confirms are awaited together.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from aio_pika.abc import AbstractChannel, AbstractExchange

from broker.backends.rabbitmq.connection import RabbitmqConnection, close_quietly, declare_exchange
from broker.backends.rabbitmq.errors import translate
from broker.backends.rabbitmq.mapping import routing_key, to_sdk
from broker.backends.rabbitmq.settings import check_name
from broker.errors import PublishError, Timeout
from broker.message import OutboundMessage

__all__ = ["RabbitmqPublishDriver"]


class RabbitmqPublishDriver:
    """A ``broker.publishing.PublishDriver`` on one confirm-mode channel."""

    def __init__(self, connection: RabbitmqConnection) -> None:
        self._connection = connection
        self._settings = connection.settings
        self._channel: AbstractChannel | None = None
        self._exchanges: dict[str, AbstractExchange] = {}
        self._lock = asyncio.Lock()

    def check_topic(self, name: str) -> None:
        """Refuse names RabbitMQ does not take for an exchange."""
        check_name(name, "topic (exchange)")

    async def _exchange(self, topic: str) -> AbstractExchange:
        channel = self._channel
        exchange = self._exchanges.get(topic)
        if exchange is not None and channel is not None and not channel.is_closed:
            return exchange
        async with self._lock:
            if self._channel is None or self._channel.is_closed:  # a channel error closed it: start over
                self._exchanges.clear()
                self._channel = await self._connection.channel(confirms=True)
            exchange = self._exchanges.get(topic)
            if exchange is None:
                exchange = await declare_exchange(self._channel, topic, self._settings)
                self._exchanges[topic] = exchange
            return exchange

    async def send(self, topic: str, messages: Sequence[OutboundMessage], timeout: float | None) -> None:
        """Publish ``messages`` to the topic's exchange; return once the broker confirmed them all."""
        settings = self._settings
        kind, persistent = settings.exchange_type, settings.persistent
        doing = f"publishing to {topic!r}"
        try:
            async with asyncio.timeout(settings.publish_timeout if timeout is None else timeout):
                exchange = await self._exchange(topic)
                publishes = [
                    exchange.publish(to_sdk(m, persistent), routing_key(m, kind), mandatory=False)
                    for m in messages
                ]
                await (publishes[0] if len(publishes) == 1 else asyncio.gather(*publishes))
        except TimeoutError as exc:
            raise Timeout(f"{doing}: no confirm from the broker in time") from exc
        except Exception as exc:
            raise translate(exc, doing, PublishError) from exc

    async def close(self) -> None:
        """Close the channel (every publish has been confirmed by then)."""
        channel, self._channel = self._channel, None
        self._exchanges.clear()
        await close_quietly(channel, self._settings.close_timeout)
