"""Redis Streams backend (``redis://[user:password@]host:port[/db]``, ``rediss://`` for TLS), on redis-py.

Connect with ``broker.connect("redis://127.0.0.1:6379")``; query parameters and mapping keys fill
:class:`~broker.backends.redis.settings.RedisSettings`. A topic is a stream, a subscription a
consumer group of it (:mod:`broker.backends.redis.backend` has the full mapping,
:mod:`broker.backends.redis.mapping` the fields of an entry). ``factory.dev_server()`` (``broker
dev redis``) starts a local ``redis-server`` on loopback.

The package: ``registration`` (``factory``, the ``broker.backends`` entry point of both schemes;
no SDK import), ``devserver`` (the local server), ``settings``, ``mapping`` (entries to and from
messages), ``errors`` (redis-py exceptions to :mod:`broker.errors`), ``backend`` (the backend, its
client, the publish driver, the backlog) and ``consumer`` (the pull driver and its acker).
``factory.open()`` imports ``redis`` (the ``redis`` extra).
"""

from __future__ import annotations

from broker.backends.redis.devserver import RedisServerNotFound, find_redis_server, redis_dev_server
from broker.backends.redis.registration import RedisFactory, factory
from broker.backends.redis.settings import ConsumerOptions, RedisSettings

__all__ = [
    "ConsumerOptions",
    "RedisFactory",
    "RedisServerNotFound",
    "RedisSettings",
    "factory",
    "find_redis_server",
    "redis_dev_server",
]
