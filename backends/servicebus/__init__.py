"""Azure Service Bus backend (azure-servicebus, aio): queues, topics and subscriptions.

``broker.connect("servicebus://NAMESPACE?shared_access_key_name=...&shared_access_key=...")`` or
``broker.connect("Endpoint=sb://...;SharedAccessKeyName=...;SharedAccessKey=...")``. See
:mod:`broker.backends.servicebus.backend` for how topic and subscription names map onto entities and
:mod:`broker.backends.servicebus.consumer` for what ack, nack, in_progress and dead_letter do.

The SDK is imported only when a backend is opened (``pip install 'polybroker[servicebus]'``).
"""

from __future__ import annotations

from broker.backends.servicebus.settings import MAX_BATCH_SIZE, ConsumerOptions, ServiceBusSettings

__all__ = ["MAX_BATCH_SIZE", "ConsumerOptions", "ServiceBusSettings"]
