"""Registration of ``servicebus://`` (Azure Service Bus) under the ``broker.backends`` entry points.

Imports no SDK: :meth:`ServiceBusFactory.open` imports ``azure.servicebus`` (the ``servicebus``
extra). ``broker.connect`` also routes a connection string (``Endpoint=sb://...``) here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any
from urllib.parse import unquote

from broker.backend import Backend
from broker.backends.servicebus.settings import ServiceBusSettings
from broker.dependencies import import_for_extra
from broker.errors import ConfigError
from broker.settings import ParsedUrl

__all__ = ["ServiceBusFactory", "factory"]


class ServiceBusFactory:
    """Builds :class:`~broker.backends.servicebus.backend.ServiceBusBackend` from ``servicebus://NAMESPACE?...``."""

    extra = "servicebus"
    settings_type = ServiceBusSettings
    #: The native mechanism behind each capability (the README's capability matrix).
    mechanisms: Mapping[str, str] = {
        "persistent": "entity storage",
        "messages": "peek-lock receiver",
        "nack_redelivers": "abandon",
        "delayed_nack": "scheduled copy",
        "ack_deadline": "lock renewal up to the deadline",
        "in_progress": "lock renewal",
        "delivery_attempt": "DeliveryCount",
        "dead_letter": "dead-letter sub-queue / forward",
        "competing_consumers": "one subscription",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """The namespace from the host (``myns`` or ``myns.servicebus.windows.net``).

        ``servicebus://KEYNAME:KEY@NAMESPACE`` gives a shared access key (URL-encode the key).
        """
        options: dict[str, Any] = {}
        if len(url.hosts) > 1:
            raise ConfigError("a servicebus:// URL names one namespace")
        if url.hosts:
            options["namespace"] = url.hosts[0]
        if url.path.strip("/"):
            raise ConfigError(
                "a servicebus:// URL has no path; name queues and topics when publishing and consuming"
            )
        if url.username is not None or url.password is not None:
            if url.username is None or url.password is None:
                raise ConfigError("servicebus://KEYNAME:KEY@NAMESPACE needs both the key name and the key")
            options["shared_access_key_name"] = unquote(url.username)
            options["shared_access_key"] = unquote(url.password)
        return options

    def open(self, settings: ServiceBusSettings) -> Backend:
        """The backend for ``settings`` (connects on first use)."""
        import_for_extra(self.extra, "azure.servicebus.aio", named="azure.servicebus")
        from broker.backends.servicebus.backend import ServiceBusBackend

        return ServiceBusBackend(settings)


factory = ServiceBusFactory()
