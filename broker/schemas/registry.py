"""The Schema Registry connection: confluent-kafka's client, its calls run off the event loop.

:class:`Registry` wraps ``confluent_kafka.schema_registry.SchemaRegistryClient`` (its
``mock://`` URLs give confluent-kafka's in-memory registry, the vendor's own test double). The
client caches what it fetched (schemas by id and GUID, ids by subject and schema, latest versions
for ``cache_latest_ttl`` seconds); every call that may go to the network is made in a worker thread
by the ``a...`` methods, so the event loop never waits on HTTP. The credentials are passed to the
client and kept nowhere else: not in ``repr``, errors or logs.
"""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Callable
from typing import Any, TypeVar
from urllib.parse import urlsplit, urlunsplit

from broker.errors import ConfigError, MissingDependency
from broker.schemas.errors import translate

__all__ = ["Registry", "sdk"]

R = TypeVar("R")


def sdk(module: str = "confluent_kafka.schema_registry") -> Any:
    """A module of confluent-kafka's registry package; :class:`~broker.errors.MissingDependency`
    naming the ``schemas`` extra when it is not installed."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency("schemas", module, needed_by="broker.schemas") from exc


def _public_url(url: str) -> str:
    parts = urlsplit(url)
    host = parts.hostname or ""
    if parts.port:
        host = f"{host}:{parts.port}"
    return urlunsplit((parts.scheme, host, parts.path, "", ""))


class Registry:
    """A Schema Registry: ``Registry("https://sr:8081", basic_auth=("key", "secret"))``.

    ``url`` may list several registries separated by commas; ``mock://name`` is confluent-kafka's
    in-memory registry. ``client=`` wraps a client you made yourself (a
    ``SchemaRegistryClient`` or ``MockSchemaRegistryClient``, sharing its caches). ``timeout``
    (seconds) bounds each HTTP request (None: unbounded); ``max_retries`` is the client's retries of
    a failed request (None: confluent-kafka's 3, with a random backoff of up to 1, 2, 4 s between
    tries), so with the defaults a registry that never answers costs a lookup about 43.5 s on
    average, 47 s at most;
    ``cache_latest_ttl`` how long "latest version" answers are kept (None: until
    :meth:`clear_caches`); ``config`` adds any other client setting (``ssl.ca.location``, ...).
    """

    __slots__ = ("client", "url")

    def __init__(
        self,
        url: str | None = None,
        *,
        basic_auth: tuple[str, str] | None = None,
        timeout: float | None = 10.0,
        max_retries: int | None = None,
        cache_latest_ttl: float | None = None,
        config: dict[str, Any] | None = None,
        client: Any = None,
    ) -> None:
        if client is not None:
            if url is not None or basic_auth is not None or config:
                raise ConfigError("give a registry url (and settings) or client=, not both")
            #: The confluent-kafka registry client underneath (escape hatch).
            self.client = client
            rest = getattr(client, "_rest_client", None)
            urls = getattr(rest, "base_urls", None) or ["(client)"]
            #: The registry URL(s), without user information.
            self.url = ",".join(_public_url(u) for u in urls)
            return
        if not url or not isinstance(url, str):
            raise ConfigError("a schema registry needs a url (or client=)")
        conf: dict[str, Any] = {"url": url}
        if basic_auth is not None:
            user, secret = basic_auth
            conf["basic.auth.user.info"] = f"{user}:{secret}"
        if timeout is not None:
            conf["timeout"] = timeout
        if max_retries is not None:
            conf["max.retries"] = max_retries
        if cache_latest_ttl is not None:
            conf["cache.latest.ttl.sec"] = cache_latest_ttl
        conf.update(config or {})
        module = sdk()
        try:
            self.client = module.SchemaRegistryClient.new_client(conf)
        except Exception as exc:
            text = str(translate(exc, "configuring the client"))
            raise ConfigError(f"invalid schema registry settings: {text}") from None
        self.url = ",".join(_public_url(u.strip()) for u in url.split(","))

    def __repr__(self) -> str:
        return f"<Registry {self.url}>"

    def call(self, doing: str, function: Callable[..., R], *args: Any) -> R:
        """``function(*args)`` (a client call), its failure as a :mod:`broker.errors` error."""
        try:
            return function(*args)
        except Exception as exc:
            raise translate(exc, doing) from exc

    async def acall(self, doing: str, function: Callable[..., R], *args: Any) -> R:
        """:meth:`call` in a worker thread: the event loop goes on meanwhile."""
        return await asyncio.to_thread(self.call, doing, function, *args)

    def schema(self, schema_id: int) -> Any:
        """The registered schema with ``schema_id`` (``Schema``), from the cache or the registry."""
        return self.call(f"looking up schema id {schema_id}", self.client.get_schema, schema_id)

    def schema_by_guid(self, guid: str) -> Any:
        """The registered schema with GUID ``guid``, from the cache or the registry."""
        return self.call(f"looking up schema GUID {guid}", self.client.get_schema_by_guid, guid)

    async def aschema(self, schema_id: int) -> Any:
        """:meth:`schema`, off the event loop."""
        return await self.acall(f"looking up schema id {schema_id}", self.client.get_schema, schema_id)

    async def aschema_by_guid(self, guid: str) -> Any:
        """:meth:`schema_by_guid`, off the event loop."""
        return await self.acall(f"looking up schema GUID {guid}", self.client.get_schema_by_guid, guid)

    async def register(self, subject: str, schema: Any, *, normalize: bool = False) -> int:
        """Register ``schema`` (a ``Schema`` or its text, Avro) under ``subject``; its id."""
        if isinstance(schema, str):
            schema = sdk().Schema(schema, "AVRO")
        result: int = await self.acall(
            f"registering a schema under {subject!r}", self.client.register_schema, subject, schema, normalize
        )
        return result

    async def latest(self, subject: str) -> Any:
        """The latest registered version of ``subject`` (``RegisteredSchema``)."""
        return await self.acall(
            f"reading the latest version of {subject!r}", self.client.get_latest_version, subject
        )

    async def set_compatibility(self, level: str, subject: str | None = None) -> None:
        """Set the compatibility level (``BACKWARD``, ``FULL``, ``NONE``, ...) of ``subject`` or globally."""
        await self.acall(f"setting compatibility {level}", self.client.set_compatibility, subject, level)

    def clear_caches(self) -> None:
        """Forget every cached schema, id and latest version."""
        clear = getattr(self.client, "clear_caches", None)
        if clear is not None:
            clear()

    def close(self) -> None:
        """Release the client's HTTP connections (idempotent)."""
        rest = getattr(self.client, "_rest_client", None)
        session = getattr(rest, "session", None)
        if session is not None:
            session.close()
