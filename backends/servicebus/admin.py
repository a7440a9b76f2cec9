"""Creating missing queues, topics and subscriptions through Service Bus's management API.

Service Bus creates nothing on first use, so without this a consumer opened on a subscription
nobody made, or a publish to a topic nobody made, fails. With ``create_missing`` (the default) the
backend makes them, as the Pub/Sub backend does: a consumer creates the queue, or the topic and
subscription, it reads when it is entered (so every message published afterwards reaches it); a
publisher creates a missing topic when its first send finds none.

The management API is HTTPS REST (``ServiceBusAdministrationClient``, run in a worker thread: the
aio client needs aiohttp). It needs the Manage right: an identity without it (401/403), or a
management endpoint that cannot be reached, is logged once and creation is off from then on for
that backend, so a missing entity is reported by the data plane as ``UnknownTopic``, as with
``create_missing=false``. Under ``provision="verify"`` the same client only looks entities up
(:meth:`EntityAdmin.verify_sender`, :meth:`EntityAdmin.verify_consumer_entity`), and any answer other
than "not found" is raised, never taken for "exists".
``management_endpoint`` points the client elsewhere (an emulator's plain-HTTP port).
"""

from __future__ import annotations

import asyncio
import datetime
import logging
from typing import Any
from urllib.parse import urlsplit, urlunsplit

from azure.core.exceptions import (
    HttpResponseError,
    ResourceExistsError,
    ResourceNotFoundError,
    ServiceRequestError,
)
from azure.core.pipeline.transport import RequestsTransport

from broker.backends.servicebus.errors import translate
from broker.backends.servicebus.settings import ConsumerOptions, ServiceBusSettings, check_connection_string
from broker.errors import ConfigError, ProvisioningError

__all__ = ["EMULATOR_MANAGEMENT_PORT", "EntityAdmin", "management_endpoint"]

log = logging.getLogger("broker.backends.servicebus")

#: The plain-HTTP management port of Microsoft's Service Bus emulator.
EMULATOR_MANAGEMENT_PORT = 5300
#: Service Bus's longest lock duration (seconds): a longer ``ack_deadline`` is reached by renewal.
MAX_LOCK_DURATION = 300.0
#: Service Bus's default MaxDeliveryCount.
DEFAULT_MAX_DELIVERY_COUNT = 10


def management_endpoint(settings: ServiceBusSettings) -> str | None:
    """The management endpoint to redirect to, or None for the SDK's own ``https://NAMESPACE``.

    Without TLS (an emulator connection string, or ``use_tls=false``) it is plain HTTP on the
    host's port 5300, where Microsoft's emulator serves it.
    """
    if settings.management_endpoint is not None:
        return settings.management_endpoint.rstrip("/")
    if settings.connection_string is not None:
        properties = check_connection_string(settings.connection_string)
        if properties.get("usedevelopmentemulator", "").lower() != "true":
            return None
        host = properties["endpoint"].split("://", 1)[1].split("/", 1)[0]
    elif not settings.use_tls:
        host = settings.fully_qualified_namespace or ""
    else:
        return None
    hostname = host.rsplit(":", 1)[0] if ":" in host and not host.endswith("]") else host
    return f"http://{hostname}:{EMULATOR_MANAGEMENT_PORT}"


class _Redirect(RequestsTransport):  # type: ignore[misc]
    """A transport that sends every request to ``base`` (scheme, host and port), path unchanged."""

    def __init__(self, base: str, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        parts = urlsplit(base)
        self._scheme, self._netloc = parts.scheme, parts.netloc

    def send(self, request: Any, **kwargs: Any) -> Any:
        parts = urlsplit(request.url)
        request.url = urlunsplit((self._scheme, self._netloc, parts.path, parts.query, parts.fragment))
        return super().send(request, **kwargs)


def entity_properties(options: ConsumerOptions) -> dict[str, Any]:
    """What a consumer's options ask of the queue or subscription it creates."""
    properties: dict[str, Any] = {}
    if options.ack_deadline is not None:
        # Honoured after a crash only when the lock is no longer than the deadline (see consumer).
        properties["lock_duration"] = datetime.timedelta(seconds=min(options.ack_deadline, MAX_LOCK_DURATION))
    if options.max_attempts is not None and options.max_attempts >= DEFAULT_MAX_DELIVERY_COUNT:
        properties["max_delivery_count"] = options.max_attempts + 1  # the consumer dead-letters first
    if options.uses_sessions:
        properties["requires_session"] = True
    return properties


class EntityAdmin:
    """Creates missing entities of one namespace (each at most once per backend)."""

    def __init__(self, settings: ServiceBusSettings) -> None:
        self.settings = settings
        self.enabled = bool(settings.create_missing)
        #: ``provision="verify"``: senders and consumers check their entities (:meth:`verify_sender`,
        #: :meth:`verify_consumer_entity`) and a missing one is a ``ProvisioningError`` naming it.
        self.verify = settings.provision == "verify"
        #: Entities found under ``verify`` (asked once each).
        self._found: set[str] = set()
        self._client: Any = None
        self._known: set[str] = set()
        self._lock = asyncio.Lock()
        self._warned = False

    def __repr__(self) -> str:
        return f"<EntityAdmin {'on' if self.enabled else 'off'}>"

    def _make_client(self) -> Any:
        from azure.servicebus.management import ServiceBusAdministrationClient

        settings = self.settings
        endpoint = management_endpoint(settings)
        # A refused connection is not retried at length: no management API there (see _skip).
        kwargs: dict[str, Any] = {"retry_total": settings.retry_total, "retry_connect": 1}
        if endpoint is not None:
            kwargs["transport"] = _Redirect(endpoint)
        connection_string = settings.connection_string
        if connection_string is None:
            # The SDK's own connection-string form carries a key or a SAS token to its signing policy.
            if settings.shared_access_key_name is not None and settings.shared_access_key is not None:
                credential = (
                    f"SharedAccessKeyName={settings.shared_access_key_name};"
                    f"SharedAccessKey={settings.shared_access_key}"
                )
            elif settings.sas_token is not None:
                credential = f"SharedAccessSignature={settings.sas_token}"
            else:
                return None  # an async token credential: the sync management client cannot use it
            connection_string = f"Endpoint=sb://{settings.fully_qualified_namespace}/;{credential}"
        return ServiceBusAdministrationClient.from_connection_string(connection_string, **kwargs)

    def _skip(self, why: str) -> None:
        settings = self.settings
        for secret in (settings.connection_string, settings.shared_access_key, settings.sas_token):
            if secret:
                why = why.replace(secret, "***")  # credentials never reach the log
        if not self._warned:
            self._warned = True
            log.warning("Service Bus: missing entities are not created (%s)", why)
        self.enabled = False

    async def ensure_topic(self, name: str) -> None:
        """Create topic ``name`` unless it exists (or creation is off)."""
        await self._ensure(f"topic:{name}", "create_topic", (name,), {})

    async def ensure_consumer_entity(
        self, topic: str, subscription: str | None, options: ConsumerOptions
    ) -> None:
        """Create the queue ``topic`` (``subscription`` None), or topic ``topic`` and its subscription."""
        properties = entity_properties(options)
        if subscription is None:
            await self._ensure(f"queue:{topic}", "create_queue", (topic,), properties)
            return
        await self.ensure_topic(topic)
        await self._ensure(
            f"sub:{topic}/{subscription}", "create_subscription", (topic, subscription), properties
        )

    async def _ensure(
        self, key: str, operation: str, args: tuple[str, ...], properties: dict[str, Any]
    ) -> None:
        if not self.enabled or key in self._known:
            return
        async with self._lock:  # one client, one request at a time
            if not self.enabled or key in self._known:
                return
            if self._client is None:
                self._client = self._make_client()
                if self._client is None:
                    self._skip("a token credential object cannot be used by the management client")
                    return
            try:
                await asyncio.to_thread(getattr(self._client, operation), *args, **properties)
            except ResourceExistsError:
                pass  # made by someone else, or earlier: it exists, as it is
            except HttpResponseError as exc:
                status = getattr(exc, "status_code", None)
                if status in (401, 403):
                    self._skip(f"the identity has no Manage right: {status}")
                    return
                if status == 400:
                    raise ConfigError(
                        f"Service Bus refused to create {key.split(':', 1)[1]!r}: {exc.message}"
                    ) from exc
                log.warning("Service Bus: creating %s failed: %s", key, exc)
                return
            except (ServiceRequestError, ConnectionError) as exc:
                # Unreachable (no management API here): each open would wait for the client's retries.
                self._skip(f"the management endpoint cannot be reached: {exc}")
                return
            except Exception as exc:  # creation is a convenience: it never breaks publishing or receiving
                self._skip(f"the management client failed: {exc!r}")
                return
            self._known.add(key)

    async def verify_sender(self, name: str) -> None:
        """Under ``verify``: ``ProvisioningError`` unless a queue or a topic ``name`` exists (a
        publisher sends to either)."""
        if await self.missing_entity(name):
            raise ProvisioningError("servicebus", [f"queue or topic {name!r}"])

    async def verify_consumer_entity(self, topic: str, subscription: str | None) -> None:
        """Under ``verify``: ``ProvisioningError`` naming the queue ``topic`` (``subscription`` None),
        or the topic and the subscription, when missing."""
        if subscription is None:
            if await self._missing(f"queue:{topic}", "get_queue", (topic,)):
                raise ProvisioningError("servicebus", [f"queue {topic!r}"])
            return
        missing = []
        if await self._missing(f"sub:{topic}/{subscription}", "get_subscription", (topic, subscription)):
            missing.append(f"subscription {subscription!r} of topic {topic!r}")
            if await self._missing(f"topic:{topic}", "get_topic", (topic,)):
                missing.append(f"topic {topic!r}")
        if missing:
            raise ProvisioningError("servicebus", missing)

    async def missing_entity(self, name: str) -> bool:
        """True when neither a queue nor a topic ``name`` exists (asked through the management API)."""
        if not await self._missing(f"queue:{name}", "get_queue", (name,), either=True):
            return False
        return await self._missing(f"topic:{name}", "get_topic", (name,), either=True)

    async def _missing(
        self, key: str, operation: str, args: tuple[str, ...], *, either: bool = False
    ) -> bool:
        """True when the management API answers "not found" for ``operation(*args)``.

        Queues and topics share one name space: asked for a queue, the API answers with the topic
        of that name (and the SDK fails to read it as a queue, an ``AttributeError``). That is "an
        entity of the other kind": missing for this kind, but an existing one when ``either``
        kind will do (a publisher's target).

        Under ``verify`` the answer matters: an identity without the Manage right, an unreachable
        endpoint or a token credential (which the management client cannot use) is an error here,
        never "exists".
        """
        if key in self._found:
            return False
        async with self._lock:
            if self._client is None:
                self._client = self._make_client()
                if self._client is None:
                    raise ConfigError(
                        "servicebus: provision='verify' looks entities up through the management API, "
                        "which needs a connection string, a shared access key or a SAS token (not a "
                        "token credential object); use provision='none' with this credential"
                    )
            try:
                await asyncio.to_thread(getattr(self._client, operation), *args)
            except ResourceNotFoundError:
                return True
            except AttributeError:  # the name is an entity of the other kind (see above)
                if not either:
                    return True
            except Exception as exc:
                raise translate(exc, f"verifying {key.replace(':', ' ', 1)!r}") from exc
        self._found.add(key)
        return False

    async def close(self) -> None:
        """Release the management client (idempotent)."""
        client, self._client = self._client, None
        if client is not None:
            await asyncio.to_thread(client.close)
