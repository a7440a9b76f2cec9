"""The blocking API: publish and consume from synchronous code (Flask, Django, Celery, scripts).

``broker.sync.connect(url)`` returns a :class:`SyncBackend` with the portable surface of
:func:`broker.connect`, without ``await``::

    with broker.sync.connect("inmem://orders") as backend:
        backend.publisher().topic("orders").publish(broker.OutboundMessage(b"order 1"))

Every call runs the async API's own code on one background event-loop thread per process
(:mod:`broker.sync.portal`); nothing of a backend is implemented twice. Calling it inside a
running event loop raises :class:`~broker.errors.BlockingInEventLoop`; a forked child re-connects
on first use. ``docs/blocking.md`` explains what runs where.
"""

from __future__ import annotations

from broker.sync.backend import DEFAULT_READ_AHEAD, SyncBackend, connect
from broker.sync.consuming import SyncMessage, SyncMessages, SyncRecord, SyncRecords
from broker.sync.portal import DEFAULT_CLOSE_TIMEOUT, DEFAULT_TIMEOUT
from broker.sync.publishing import DeliveryCallback, SyncPublisher, SyncTopic, SyncTypedTopic

__all__ = [
    "DEFAULT_CLOSE_TIMEOUT",
    "DEFAULT_READ_AHEAD",
    "DEFAULT_TIMEOUT",
    "DeliveryCallback",
    "SyncBackend",
    "SyncMessage",
    "SyncMessages",
    "SyncPublisher",
    "SyncRecord",
    "SyncRecords",
    "SyncTopic",
    "SyncTypedTopic",
    "connect",
]
