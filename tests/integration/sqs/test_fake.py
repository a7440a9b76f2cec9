"""The moto fake itself: concurrent receives of one queue never hand out the same message twice.

moto answers each request in a thread; unlocked, two receivers woken by one send both take the same
messages inside their visibility timeout. The tests' server runs moto through
``broker.backends.sqs.motofake``, which locks each receive pass, send and delete. Checked here on
moto's SQS model in this process (no HTTP: cheap, and the threads race as the server's do).
"""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator

import pytest

from broker.backends.sqs.devserver import moto_dev_server

models = pytest.importorskip("moto.sqs.models", reason="moto (the test extra) is not installed")


@pytest.fixture
def fast_thread_switches() -> Iterator[None]:
    """Switch threads as often as the interpreter can, so that a race shows in a few rounds."""
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    try:
        yield
    finally:
        sys.setswitchinterval(before)


def test_two_waiting_receivers_never_share_a_message(
    monkeypatch: pytest.MonkeyPatch, fast_thread_switches: None
) -> None:
    from broker.backends.sqs.motofake import serialize_queues

    for name in ("add_message", "delete_message"):  # restored after the test
        monkeypatch.setattr(models.Queue, name, getattr(models.Queue, name))
    monkeypatch.setattr(models.SQSBackend, "receive_message", models.SQSBackend.receive_message)
    serialize_queues()
    sqs = models.SQSBackend("us-east-1", "123456789012")
    queue = sqs.create_queue("shared")
    handed: Counter[str] = Counter()
    sent = 0
    for _ in range(200):
        got: list[str] = []

        def receive(got: list[str] = got) -> None:
            got.extend(m.body for m in sqs.receive_message("shared", 1, 2, 30))

        receivers = [threading.Thread(target=receive) for _ in range(2)]
        for receiver in receivers:
            receiver.start()
        time.sleep(0.002)  # both are waiting for a message
        for _ in range(2):  # one for each
            sqs.send_message("shared", str(sent))
            sent += 1
        for receiver in receivers:
            receiver.join(10)
        handed.update(got)
        for message in list(queue._messages):  # a fresh queue each round
            queue.delete_message(message.receipt_handle)
    twice = {body: n for body, n in handed.items() if n > 1}
    assert handed, "no receive got anything"
    assert not twice, f"{len(twice)} of {sent} messages went to both receivers: {sorted(twice)[:10]}"


def test_the_dev_server_runs_moto_through_the_lock() -> None:
    assert moto_dev_server().command[:3] == [sys.executable, "-m", "broker.backends.sqs.motofake"]
