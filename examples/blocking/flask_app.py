"""A Flask 3.1 view that publishes an order on each request, through the blocking API.

Run it with Flask's server or under gunicorn (pre-fork, two workers)::

    BROKER_URL=nats://127.0.0.1:4222 gunicorn -w 2 --preload 'examples.blocking.flask_app:app'

The backend is connected once per process at import. With ``--preload`` the workers are forked
from a master that already connected: each worker gets a fresh loop thread and connection on its
first publish (``docs/blocking.md``, "Fork").
"""

from __future__ import annotations

import json
import os
from typing import Any

from flask import Flask, jsonify, request

import broker.sync
from broker import OutboundMessage


def create_app(url: str | None = None, topic: str | None = None) -> Flask:
    """The app, publishing to ``topic`` (default: ``$ORDERS_TOPIC`` or ``orders``) of the broker at
    ``url`` (default: ``$BROKER_URL``, or an in-memory broker)."""
    app = Flask(__name__)
    backend = broker.sync.connect(url or os.environ.get("BROKER_URL", "inmem://orders"), timeout=10)
    orders = backend.publisher().topic(topic or os.environ.get("ORDERS_TOPIC", "orders"))
    app.extensions["broker"] = backend

    @app.post("/orders")
    def place_order() -> Any:
        order = request.get_json(force=True)
        if not isinstance(order, dict) or "id" not in order:
            return jsonify(error="an order needs an id"), 400
        # returns once the broker has the order; a broker that is down raises within the timeout
        orders.publish(
            OutboundMessage(
                json.dumps(order).encode(), key=str(order["id"]), attributes={"pid": str(os.getpid())}
            ),
            timeout=5,
        )
        return jsonify(status="accepted", id=order["id"], pid=os.getpid()), 202

    return app


app = create_app()
