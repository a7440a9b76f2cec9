"""Registration of ``servicebus://`` (Azure Service Bus) under the ``broker.backends`` entry points.

Imports no SDK: :meth:`ServiceBusFactory.open` imports ``azure.servicebus`` (the ``servicebus``
extra). ``broker.connect`` also routes a connection string (``Endpoint=sb://...``) here.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import unquote

from broker.backends.servicebus.settings import ServiceBusSettings
from broker.driver.registration import BackendRegistration, no_path, one_host
from broker.driver.settings import ParsedUrl
from broker.errors import ConfigError

__all__ = ["ServiceBusFactory", "factory"]


class ServiceBusFactory(BackendRegistration):
    """Builds :class:`~broker.backends.servicebus.backend.ServiceBusBackend` from ``servicebus://NAMESPACE?...``."""

    extra = "servicebus"
    settings_type = ServiceBusSettings
    sdk = "azure.servicebus.aio"
    sdk_package = "azure.servicebus"
    backend = "broker.backends.servicebus.backend:ServiceBusBackend"
    mechanisms = {
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
        namespace = one_host(url, "namespace")
        if namespace is not None:
            options["namespace"] = namespace
        no_path(url, "name queues and topics when publishing and consuming")
        if url.username is not None or url.password is not None:
            if url.username is None or url.password is None:
                raise ConfigError("servicebus://KEYNAME:KEY@NAMESPACE needs both the key name and the key")
            options["shared_access_key_name"] = unquote(url.username)
            options["shared_access_key"] = unquote(url.password)
        return options


factory = ServiceBusFactory()
