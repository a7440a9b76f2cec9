"""In-memory broker: a partitioned log AND a message queue, for tests, demos and examples.

``broker.connect("inmem://orders")`` opens the process-wide broker called ``orders``.
Message-queue semantics: competing consumers, ack, nack with delay, ack deadline with automatic
redelivery, ``in_progress``, delivery attempts, dead-lettering after ``max_attempts``.
Log semantics: key-hashed partitions (murmur2), offsets, consumer groups with assignment and
commits, watermarks, replay from an offset, transactions. ``backend.log()`` gives the
``broker.log`` port. ``faults_of(backend)`` injects failures (``faults.py``) for tests.
"""

from broker.backends.inmem.backend import InmemBackend
from broker.backends.inmem.faults import Faults, faults_of
from broker.backends.inmem.log import InmemLog
from broker.backends.inmem.settings import ConsumerOptions, InmemSettings
from broker.backends.inmem.store import InmemBroker, forget, get_broker

__all__ = [
    "ConsumerOptions",
    "Faults",
    "InmemBackend",
    "InmemBroker",
    "InmemLog",
    "InmemSettings",
    "faults_of",
    "forget",
    "get_broker",
]
