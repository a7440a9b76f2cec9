"""Amazon SQS and SNS backend (``sqs://REGION``, ``sqs://REGION?mode=queue``), on aiobotocore.

Connect with ``broker.connect("sqs://us-east-1")``; query parameters and mapping keys fill
:class:`~broker.backends.sqs.settings.SqsSettings`. In SNS mode (the default) a topic is an SNS
topic and a subscription an SQS queue subscribed to it with raw message delivery; in queue mode a
topic is a plain SQS queue (:mod:`broker.backends.sqs.backend` has the full mapping,
:mod:`broker.backends.sqs.mapping` the fields of a message). ``factory.dev_server()`` (``broker
dev sqs``) starts a local fake of both services (moto's server).

The package: ``registration`` (``factory``, the ``broker.backends`` entry point; no SDK import),
``devserver`` (the fake), ``settings``, ``mapping``, ``errors`` (botocore exceptions to
:mod:`broker.errors`), ``backend`` (the clients, the publish driver, the backlog) and ``consumer``
(the pull driver and its acker). ``factory.open()`` imports ``aiobotocore`` (the ``sqs`` extra).
"""

from __future__ import annotations

from broker.backends.sqs.devserver import MotoServerNotFound, moto_dev_server
from broker.backends.sqs.registration import SqsFactory, factory
from broker.backends.sqs.settings import ConsumerOptions, SqsSettings

__all__ = ["ConsumerOptions", "MotoServerNotFound", "SqsFactory", "SqsSettings", "factory", "moto_dev_server"]
