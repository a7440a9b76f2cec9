"""NATS JetStream backend (``nats://host:port``), on nats-py.

Connect with ``broker.connect("nats://127.0.0.1:4222")``; query parameters and mapping keys fill
:class:`~broker.backends.jetstream.settings.JetStreamSettings` (``nats://host:4222/ORDERS`` names the
stream). The connection opens lazily on first use and reconnects by itself.

How the portable API maps onto JetStream:

* ``publisher().topic("orders.eu")`` publishes to the subject ``orders.eu``; ``publish`` returns
  when the stream's PubAck came back, ``batch_publish`` pipelines with a bounded window of
  PubAcks (``publish_window``).
* The topic is stored in the stream named by ``stream`` (setting or option), else in the stream
  whose subjects cover it, else in a new stream named after it (``orders_eu``). On locked-down
  servers ``provision=verify`` (nothing created; what is missing is a ``ProvisioningError``) or
  ``provision=none`` (nothing created or asked beforehand) use streams and consumers as they are
  (:mod:`broker.backends.jetstream.provisioning`).
* ``messages(topic, subscription)``: ``subscription`` names a durable pull consumer filtered on
  ``topic``; every consumer of that name competes for its messages, different names each get
  every message. ``ack_deadline`` is the consumer's ``ack_wait``; ``max_deliver`` caps deliveries.
* ``ack()`` sends ``+ACK``; ``nack(delay)`` ``-NAK`` (with the delay); ``in_progress()`` ``+WPI``;
  ``dead_letter()`` ``+TERM`` after republishing to ``dead_letter_subject`` when set.
  ``delivery_attempt`` is the server's delivery count, ``id`` the stream sequence.
* The key travels in the ``Polybroker-Key`` header, attributes as headers (anything a header
  cannot carry exactly travels JSON-encoded in ``Polybroker-Encoded``), and the attribute named
  by ``msg_id_attribute`` (``Nats-Msg-Id``) is the de-duplication id.
* ``records(topic, group)`` reads through an ``AckPolicy.ALL`` consumer: offsets are stream
  sequences, partition 0, ``Record.ack()`` commits. ``replay(topic, start_sequence=...)`` is an
  ordered read with no acknowledgement.

``factory.dev_server()`` (``broker dev nats``) starts a local ``nats-server -js``.
"""

from broker.backends.jetstream.settings import MSG_ID_HEADER, ConsumerOptions, JetStreamSettings

__all__ = ["MSG_ID_HEADER", "ConsumerOptions", "JetStreamSettings"]
