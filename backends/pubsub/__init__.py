"""Google Cloud Pub/Sub backend (google-cloud-pubsub): ``pubsub://PROJECT``.

``broker.connect("pubsub://my-project")`` uses Google Cloud with Application Default
Credentials; ``pubsub://my-project?emulator_host=127.0.0.1:8085`` an emulator
(``broker dev pubsub`` starts one). Settings are in :mod:`broker.backends.pubsub.settings`; importing
this package does not import the SDK.
"""

from broker.backends.pubsub.settings import ConsumerOptions, PubsubSettings

__all__ = ["ConsumerOptions", "PubsubSettings"]
