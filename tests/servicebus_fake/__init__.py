"""A FAKE Azure Service Bus for tests: a small AMQP 1.0 server that speaks the SDK's wire protocol.

This is not Azure and not Microsoft's emulator. It is a test-only server, built on
python-qpid-proton, that answers what the real ``azure-servicebus`` SDK (sync and aio, pure-Python
pyamqp transport) sends over a real socket on 127.0.0.1: SASL ANONYMOUS, the ``$cbs`` token
exchange (every token is accepted), sends (single and batched), peek-lock and receive-and-delete
receiving, complete / abandon / release / defer / dead-letter outcomes, lock expiry and renewal,
max-delivery-count dead-lettering into ``$DeadLetterQueue``, scheduled and cancelled messages,
deferred messages, sessions (session filter, session lock and state), topics with subscriptions,
and the ``$management`` operations behind those; and, on a second port, the HTTP management
API's entity requests (create, get, delete of queues, topics and subscriptions: ``admin_http``).
The polybroker Service Bus backend is therefore verified against the SDK's real wire protocol, not
against the Azure service: rules and filters, TTL expiry, duplicate detection, transactions,
quotas and entity updates are not modelled.

Use :class:`FakeServiceBus` (a context manager) in tests, or run ``python -m tests.servicebus_fake
--port N`` as a separate process.
"""

from tests.servicebus_fake.entities import EntityError, EntityOptions, Namespace
from tests.servicebus_fake.server import FakeServiceBus

__all__ = ["EntityError", "EntityOptions", "FakeServiceBus", "Namespace"]
