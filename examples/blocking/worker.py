"""A worker that consumes orders with a plain ``for`` loop and stops cleanly on SIGTERM.

    python -m examples.blocking.worker nats://127.0.0.1:4222

Each order is handled, then acked. SIGTERM (or Ctrl-C) ends the loop after the order in hand;
leaving the ``with`` blocks flushes the acks and nacks what was read ahead, so nothing is lost.
"""

from __future__ import annotations

import json
import signal
import sys

import broker.sync


def handle(order: dict[str, object]) -> None:
    """The application's work for one order."""
    print("handled order", order["id"], flush=True)


def main(url: str, topic: str = "orders", subscription: str = "order-workers") -> None:
    """Consume ``topic`` through ``subscription`` until SIGTERM or SIGINT."""
    with broker.sync.connect(url) as backend, backend.messages(topic, subscription) as orders:
        for signum in (signal.SIGTERM, signal.SIGINT):
            signal.signal(signum, lambda *_: orders.stop())
        print("worker ready", flush=True)
        for message in orders:
            handle(json.loads(message.data))
            message.ack()
    print("worker stopped", flush=True)


if __name__ == "__main__":
    main(*sys.argv[1:])
