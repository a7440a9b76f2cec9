"""moto's server, its SQS queues safe for concurrent clients: ``python -m broker.backends.sqs.motofake``.

moto (the fake the tests and ``broker dev sqs`` run) answers each request in a thread of its own,
and its SQS model takes no lock between finding a visible message and marking it received: two
consumers long-polling one queue both wake on a send and both get the same message, inside its
visibility timeout (raw aiobotocore, two receivers, 1,500 messages: one to four such duplicates a
run). Its ``DeleteMessage`` also rebuilds the queue's message list without the lock a send appends
under, so a send racing a delete can be dropped from the list. AWS does neither (a standard queue
may, rarely, deliver twice; it does not lose a sent message), so tests against the fake would judge
the library by the fake's races.

This entry point runs moto's own server (same arguments as ``moto_server``) after putting one lock
around each receive pass (the long-poll wait stays outside it, so receivers still wait in
parallel), each send into a queue and each delete. It changes no answer moto gives, only the
interleaving of concurrent requests.
"""

from __future__ import annotations

import sys
import threading
import time
from typing import Any

__all__ = ["main", "serialize_queues"]


def serialize_queues() -> None:
    """Make moto's SQS receive passes, sends and deletes mutually exclusive (one process-wide lock)."""
    from moto.sqs import models

    lock = threading.RLock()
    receive = models.SQSBackend.receive_message
    add = models.Queue.add_message
    delete = models.Queue.delete_message

    def receive_message(
        self: Any,
        queue_name: str,
        count: int,
        wait_seconds_timeout: int,
        visibility_timeout: int,
        message_attribute_names: list[str] | None = None,
    ) -> Any:
        deadline = time.monotonic() + (wait_seconds_timeout or 0)
        queue = self.get_queue(queue_name)
        while True:
            with lock:  # one pass, no waiting: finds visible messages and marks them received
                result = receive(self, queue_name, count, 0, visibility_timeout, message_attribute_names)
            left = deadline - time.monotonic()
            if result or left <= 0:
                return result
            queue.wait_for_messages(min(1.0, left))

    def add_message(self: Any, message: Any) -> None:
        with lock:
            add(self, message)

    def delete_message(self: Any, receipt_handle: str) -> None:
        with lock:
            delete(self, receipt_handle)

    models.SQSBackend.receive_message = receive_message  # type: ignore[method-assign]
    models.Queue.add_message = add_message  # type: ignore[method-assign]
    models.Queue.delete_message = delete_message  # type: ignore[method-assign]


def main(argv: list[str] | None = None) -> None:
    """Run moto's server (``moto_server``'s arguments) with :func:`serialize_queues` applied."""
    from moto.server import main as moto_main

    serialize_queues()
    moto_main(argv if argv is not None else sys.argv[1:])


if __name__ == "__main__":
    main()
