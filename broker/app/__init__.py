"""Applications: subscribers declared once by decorator, run on any broker — :class:`App`.

::

    app = broker.App()                      # POLYBROKER_URL, or App("kafka://...")

    @app.subscriber("orders", "billing")
    async def bill(order: Order) -> None:   # decoded by broker.typed; acked on return
        ...

See ``docs/applications.md``.
"""

from __future__ import annotations

from broker.app.application import DEFAULT_BACKEND, ENV_URL, App
from broker.app.markers import Attributes, Key
from broker.app.subscriber import AckPolicy, Subscriber
from broker.app.testing import AppTest, Delivery

__all__ = [
    "DEFAULT_BACKEND",
    "ENV_URL",
    "AckPolicy",
    "App",
    "AppTest",
    "Attributes",
    "Delivery",
    "Key",
    "Subscriber",
]
