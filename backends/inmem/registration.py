"""Registration of ``inmem://`` under the ``broker.backends`` entry points."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from broker.backend import Backend
from broker.backends.inmem.settings import InmemSettings
from broker.settings import ParsedUrl

__all__ = ["InmemFactory", "factory"]


class InmemFactory:
    """Builds :class:`~broker.backends.inmem.backend.InmemBackend` from ``inmem://NAME?setting=value``."""

    extra = ""
    settings_type = InmemSettings
    #: The native mechanism behind each capability (the README's capability matrix).
    mechanisms: Mapping[str, str] = {
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

    def open(self, settings: InmemSettings) -> Backend:
        """The backend for ``settings``."""
        from broker.backends.inmem.backend import InmemBackend

        return InmemBackend(settings)


factory = InmemFactory()
