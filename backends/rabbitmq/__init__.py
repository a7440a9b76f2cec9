"""RabbitMQ backend (``rabbitmq://user:password@host:port/vhost``), on aio-pika.

Connect with ``broker.connect("rabbitmq://guest:guest@127.0.0.1:5672/")``; query parameters and
mapping keys fill :class:`~broker.backends.rabbitmq.settings.RabbitmqSettings`. A topic is a durable
exchange, a subscription the durable quorum queue ``<topic>.<subscription>`` bound to it
(:mod:`broker.backends.rabbitmq.backend` has the full mapping). ``factory.dev_server()``
(``broker dev rabbitmq``) starts a local ``rabbitmq-server`` on loopback.
"""

from broker.backends.rabbitmq.settings import ConsumerOptions, RabbitmqSettings

__all__ = ["ConsumerOptions", "RabbitmqSettings"]
