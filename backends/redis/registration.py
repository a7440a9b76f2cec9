"""The Redis Streams backend's registration: ``redis://`` and ``rediss://`` URLs, and its dev server.

This module imports no SDK: ``factory.open()`` imports ``redis`` (redis-py, the ``redis`` extra).
"""

from __future__ import annotations

from typing import Any

from broker.backends.redis.devserver import redis_dev_server
from broker.backends.redis.settings import RedisSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration, one_host
from broker.driver.settings import ParsedUrl
from broker.errors import ConfigError

__all__ = ["RedisFactory", "factory"]


class RedisFactory(BackendRegistration):
    """Builds :class:`~broker.backends.redis.backend.RedisBackend` from
    ``redis://[user:password@]host:port[/db]`` (``rediss://``: the same over TLS)."""

    extra = "redis"
    settings_type = RedisSettings
    sdk = "redis.asyncio"
    sdk_package = "redis"
    backend = "broker.backends.redis.backend:RedisBackend"
    mechanisms = {
        "persistent": "streams, append-only file",
        "messages": "consumer group per subscription",
        "nack_redelivers": "XCLAIM IDLE, then XAUTOCLAIM",
        "delayed_nack": "XCLAIM IDLE; past the deadline held by the client",
        "ack_deadline": "idle time, XAUTOCLAIM",
        "in_progress": "XCLAIM JUSTID",
        "delivery_attempt": "XPENDING delivery count",
        "dead_letter": "XADD to the dead-letter stream + XACK (MULTI)",
        "competing_consumers": "consumers of one group",
        "records": "XREAD; commit: XGROUP SETID (one partition)",
        "replay": "XREAD from an offset (entry id) or a time",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Host and port from the URL's host, ``user:password@`` credentials (``:password@`` for
        the default user), the path as the database number; ``rediss://`` turns TLS on."""
        options: dict[str, Any] = {}
        address = one_host(url, "host")
        if address is not None:
            host, port = _host_port(address)
            options["host"] = host
            if port is not None:
                options["port"] = port
        credentials = url.credentials("user", "password", decode=True)
        if not credentials.get("user"):
            credentials.pop("user", None)  # redis://:password@host: the default user
        options.update(credentials)
        path = url.path.strip("/")
        if path:
            if not path.isdigit():
                raise ConfigError(f"the path of a {url.scheme}:// URL is a database number, got {path!r}")
            options["db"] = int(path)
        if url.scheme == "rediss":
            options["tls"] = True
        return options

    def dev_server(self, port: int | None = None, data_dir: str | None = None) -> ProcessServer:
        """An unstarted local ``redis-server``; ``with factory.dev_server() as s: s.url``."""
        return redis_dev_server(port, data_dir)


def _host_port(host: str) -> tuple[str, int | None]:
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = host.partition(":")
    if not port:
        return name, None
    if not port.isdigit():
        raise ConfigError(f"the port of a redis:// URL must be a number, got {port!r}")
    return name, int(port)


factory = RedisFactory()
