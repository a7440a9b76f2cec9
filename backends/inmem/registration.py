"""Registration of ``inmem://`` under the ``broker.backends`` entry points."""

from __future__ import annotations

from typing import Any

from broker.backends.inmem.settings import InmemSettings
from broker.driver.registration import BackendRegistration
from broker.driver.settings import ParsedUrl

__all__ = ["InmemFactory", "factory"]


class InmemFactory(BackendRegistration):
    """Builds :class:`~broker.backends.inmem.backend.InmemBackend` from ``inmem://NAME?setting=value``."""

    settings_type = InmemSettings
    backend = "broker.backends.inmem.backend:InmemBackend"
    mechanisms = {
        "per_key_order": "key → partition",
        "messages": "subscription cursor",
        "records": "consumer group",
        "nack_redelivers": "requeue",
        "delayed_nack": "delay heap",
        "ack_deadline": "lease deadline",
        "in_progress": "lease renewal",
        "delivery_attempt": "counted",
        "dead_letter": "dead_letter_topic",
        "competing_consumers": "shared subscription",
        "transactions": "buffered commit",
        "replay": "seek",
        "backlog_for_new_subscriptions": "topic keeps all",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """``inmem://NAME`` names the broker (``inmem://`` is ``default``)."""
        options: dict[str, Any] = {}
        name = (url.hosts[0] if url.hosts else "") + url.path.strip("/")
        if name:
            options["name"] = name
        return options


factory = InmemFactory()
