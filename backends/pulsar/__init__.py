"""Apache Pulsar backend (pulsar-client): ``broker.connect("pulsar://host:6650")``.

* Publishing: one producer per topic, reused; ``key`` is the partition key, ``attributes`` the
  message properties; ``batch_publish`` hands every message to the client and waits once.
* Consuming: ``messages()`` / ``batched_messages()`` on a subscription (``shared`` by default:
  competing consumers, per-message ack, nack redelivered after ``nack_redelivery_delay``, ack
  timeout, ``delivery_attempt`` from the redelivery count, dead-lettering after ``max_attempts``);
  ``records()`` reads topics as logs in a durable failover group with cumulative commits;
  ``reader()`` replays a topic from a message id.
* Closing a consumer never deletes its subscription; ``unsubscribe()`` does.
* The client's blocking calls run on threads and its callbacks are resolved on the event loop,
  so the loop never blocks.

See :mod:`broker.backends.pulsar.settings` for the settings and the choices behind their defaults. The
modules here import the ``pulsar-client`` SDK; the registration does not.
"""

from broker.backends.pulsar.settings import ConsumerOptions, PulsarSettings

__all__ = ["ConsumerOptions", "PulsarSettings"]
