"""Registration of ``pubsub://`` under the ``broker.backends`` entry points.

This module imports no SDK: :meth:`PubsubFactory.open` imports google-cloud-pubsub and raises
:class:`~broker.errors.MissingDependency` (naming the ``pubsub`` extra) when it is absent.
"""

from __future__ import annotations

from typing import Any

from broker.backends.pubsub.settings import PubsubSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration, no_path, one_host
from broker.driver.settings import ParsedUrl
from broker.errors import ConfigError

__all__ = ["PubsubFactory", "factory"]


class PubsubFactory(BackendRegistration):
    """Builds :class:`~broker.backends.pubsub.backend.PubsubBackend` from ``pubsub://PROJECT?setting=value``."""

    extra = "pubsub"
    settings_type = PubsubSettings
    sdk = "google.cloud.pubsub_v1"
    backend = "broker.backends.pubsub.backend:PubsubBackend"
    mechanisms = {
        "persistent": "retained by the service",
        "per_key_order": "ordering keys",
        "messages": "unary pull",
        "nack_redelivers": "modack 0",
        "delayed_nack": "modack to the delay",
        "ack_deadline": "ack deadline (10-600 s)",
        "in_progress": "modack",
        "delivery_attempt": "with a dead-letter policy",
        "dead_letter": "dead-letter policy",
        "competing_consumers": "one subscription",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """``pubsub://PROJECT`` names the Google Cloud project."""
        project = one_host(url, "project")
        if url.username or url.password:
            raise ConfigError("pubsub:// takes no user or password; use credentials_file or credentials_json")
        no_path(url)
        return {} if project is None else {"project": project}

    def dev_server(self, port: int | None = None) -> ProcessServer:
        """Google's Pub/Sub emulator on ``127.0.0.1:port`` (a free port by default), not yet started.

        ``with factory.dev_server() as server: broker.connect(server.url)``. Raises
        :class:`~broker.backends.pubsub.emulator.EmulatorNotFound`, naming the Debian package
        ``google-cloud-cli-pubsub-emulator``, when the emulator is not installed.
        """
        from broker.backends.pubsub.emulator import emulator_server

        return emulator_server(port)


factory = PubsubFactory()
