"""Run the FAKE Service Bus as a process: ``python -m tests.servicebus_fake --port 5672``.

Prints the connection string, then serves until interrupted (SIGINT or SIGTERM). Entities are
created on first use.
"""

from __future__ import annotations

import argparse
import signal
import threading

from tests.servicebus_fake.entities import EntityOptions
from tests.servicebus_fake.server import FakeServiceBus


def main() -> None:
    parser = argparse.ArgumentParser(description="a FAKE Service Bus (AMQP 1.0) for tests")
    parser.add_argument("--port", type=int, default=0, help="TCP port (0: a free one)")
    parser.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (the fault suite's network namespace; else loopback)",
    )
    parser.add_argument("--lock-duration", type=float, default=30.0, help="seconds a peek-lock lasts")
    parser.add_argument("--max-delivery-count", type=int, default=10)
    args = parser.parse_args()
    defaults = EntityOptions(lock_duration=args.lock_duration, max_delivery_count=args.max_delivery_count)
    done = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: done.set())
    signal.signal(signal.SIGINT, lambda *_: done.set())
    with FakeServiceBus(args.port, host=args.host, defaults=defaults) as server:
        print(server.connection_string, flush=True)
        done.wait()


if __name__ == "__main__":
    main()
