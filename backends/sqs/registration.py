"""The Amazon SQS/SNS backend's registration: ``sqs://REGION`` URLs, and its dev server (a fake).

This module imports no SDK: ``factory.open()`` imports ``aiobotocore`` (the ``sqs`` extra).
"""

from __future__ import annotations

from typing import Any

from broker.backends.sqs.devserver import moto_dev_server
from broker.backends.sqs.settings import SqsSettings
from broker.driver.devserver import ProcessServer
from broker.driver.registration import BackendRegistration, no_path, one_host
from broker.driver.settings import ParsedUrl

__all__ = ["SqsFactory", "factory"]


class SqsFactory(BackendRegistration):
    """Builds :class:`~broker.backends.sqs.backend.SqsBackend` from ``sqs://REGION`` (SNS topics,
    SQS queues as their subscriptions) or ``sqs://REGION?mode=queue`` (plain SQS queues)."""

    extra = "sqs"
    settings_type = SqsSettings
    sdk = "aiobotocore.session"
    sdk_package = "aiobotocore"
    backend = "broker.backends.sqs.backend:SqsBackend"
    mechanisms = {
        "persistent": "SQS queues (replicated by AWS)",
        "messages": "ReceiveMessage (long polling) on the subscription's queue",
        "nack_redelivers": "ChangeMessageVisibility 0",
        "delayed_nack": "ChangeMessageVisibility delay (whole seconds, at most 12 h)",
        "ack_deadline": "visibility timeout (whole seconds)",
        "in_progress": "ChangeMessageVisibility",
        "delivery_attempt": "ApproximateReceiveCount",
        "dead_letter": "RedrivePolicy (queue mode), else publish to the dead-letter topic + DeleteMessage",
        "competing_consumers": "consumers of one queue",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """The region from the URL's host; ``key_id:secret@`` credentials when given."""
        no_path(url, "name topics and subscriptions in the API")
        options: dict[str, Any] = {}
        region = one_host(url, "region")
        if region:
            options["region"] = region
        credentials = url.credentials("access_key_id", "secret_access_key", decode=True)
        options.update({k: v for k, v in credentials.items() if v})
        return options

    def dev_server(self, port: int | None = None, data_dir: str | None = None) -> ProcessServer:
        """An unstarted local moto server (a fake of SQS and SNS, not AWS); ``data_dir`` is unused:
        the fake keeps its state in memory."""
        return moto_dev_server(port)


factory = SqsFactory()
