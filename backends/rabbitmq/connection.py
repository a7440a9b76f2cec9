"""The backend's one AMQP connection (aio-pika's robust connection: it reconnects by itself).

Opened on first use; the publisher and every consumer open their own channel on it, so a channel
error (an exchange or queue declared with other settings) closes only the channel that caused it.
"""

from __future__ import annotations

import asyncio
import contextlib
import ssl

import aio_pika
from aio_pika.abc import AbstractChannel, AbstractExchange, AbstractRobustConnection, ExchangeType

from broker.backends.rabbitmq.errors import translate
from broker.backends.rabbitmq.settings import RabbitmqSettings
from broker.errors import ClosedError, ConnectionFailed

__all__ = ["RabbitmqConnection", "declare_exchange"]


class RabbitmqConnection:
    """A lazily opened robust connection with channels on demand."""

    def __init__(self, settings: RabbitmqSettings) -> None:
        self.settings = settings
        self._connection: AbstractRobustConnection | None = None
        self._lock = asyncio.Lock()
        self._closed = False

    def __repr__(self) -> str:
        s = self.settings
        return f"<RabbitmqConnection {s.host}:{s.port} vhost={s.vhost!r}>"

    def _ssl_context(self) -> ssl.SSLContext | None:
        s = self.settings
        if not s.uses_tls:
            return None
        context = ssl.create_default_context(cafile=s.tls_ca_file)
        if s.tls_cert_file:
            context.load_cert_chain(s.tls_cert_file, s.tls_key_file)
        return context

    async def connection(self) -> AbstractRobustConnection:
        """The open connection (connecting on first use)."""
        if self._closed:
            raise ClosedError("the RabbitMQ connection is closed")
        if self._connection is not None:
            return self._connection
        async with self._lock:
            if self._connection is None:
                s = self.settings
                properties: dict[str, aio_pika.abc.FieldValue] = {}
                if s.name:
                    properties["connection_name"] = s.name
                context = self._ssl_context()
                try:
                    self._connection = await asyncio.wait_for(
                        aio_pika.connect_robust(
                            host=s.host,
                            port=s.port,
                            login=s.user,
                            password=s.password,
                            virtualhost=s.vhost,
                            ssl=context is not None,
                            ssl_context=context,
                            timeout=s.connect_timeout,
                            client_properties=properties,
                            heartbeat=s.heartbeat,
                        ),
                        s.connect_timeout,
                    )
                except Exception as exc:
                    doing = f"connecting to RabbitMQ at {s.host}:{s.port}"
                    raise translate(exc, doing, ConnectionFailed) from exc
        return self._connection

    async def channel(self, *, confirms: bool = False, prefetch: int | None = None) -> AbstractChannel:
        """A new channel (with publisher confirms, or with a prefetch count for a consumer)."""
        connection = await self.connection()
        try:
            channel = await connection.channel(publisher_confirms=confirms)
            if prefetch is not None:
                await channel.set_qos(prefetch_count=prefetch)
        except Exception as exc:
            raise translate(exc, "opening a RabbitMQ channel", ConnectionFailed) from exc
        return channel

    async def close(self) -> None:
        """Close the connection (idempotent)."""
        self._closed = True
        connection, self._connection = self._connection, None
        if connection is not None:
            with contextlib.suppress(Exception, asyncio.TimeoutError):
                await asyncio.wait_for(connection.close(), self.settings.close_timeout)


async def declare_exchange(
    channel: AbstractChannel, name: str, settings: RabbitmqSettings
) -> AbstractExchange:
    """Declare the durable exchange of topic ``name`` (a no-op when it exists alike)."""
    kind = ExchangeType.TOPIC if settings.exchange_type == "topic" else ExchangeType.FANOUT
    try:
        return await channel.declare_exchange(name, kind, durable=True)
    except Exception as exc:
        raise translate(exc, f"declaring the exchange of topic {name!r}") from exc


async def close_quietly(channel: AbstractChannel | None, timeout: float) -> None:
    """Close ``channel`` if it is open, ignoring errors (the connection may be gone)."""
    if channel is not None and not channel.is_closed:
        with contextlib.suppress(Exception, asyncio.TimeoutError):
            await asyncio.wait_for(channel.close(), timeout)
