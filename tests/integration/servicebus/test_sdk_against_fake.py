"""The real azure-servicebus SDK (sync and aio, pyamqp over a socket) against the FAKE server.

These tests pin down what the fake models, independently of the polybroker backend: if one fails,
the fake no longer speaks the SDK's wire protocol the way the backend's tests assume.
"""

from __future__ import annotations

import datetime
import time
import uuid
from collections.abc import Iterator

import pytest
from azure.servicebus import (
    NEXT_AVAILABLE_SESSION,
    ServiceBusClient,
    ServiceBusMessage,
    ServiceBusReceiveMode,
    ServiceBusSubQueue,
)
from azure.servicebus.aio import ServiceBusClient as AsyncServiceBusClient
from azure.servicebus.exceptions import (
    MessageLockLostError,
    MessageSizeExceededError,
    MessagingEntityNotFoundError,
    OperationTimeoutError,
)

from tests.servicebus_fake import FakeServiceBus


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


@pytest.fixture(scope="module")
def client(fake_servicebus: FakeServiceBus) -> Iterator[ServiceBusClient]:
    with ServiceBusClient.from_connection_string(fake_servicebus.connection_string, retry_total=0) as sdk:
        yield sdk


def test_send_receive_complete_abandon_dead_letter_and_renew(
    fake_servicebus: FakeServiceBus, client: ServiceBusClient
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(
            ServiceBusMessage(b"single", application_properties={"a": "1"}, partition_key="pk")
        )
        sender.send_messages([ServiceBusMessage(f"batched-{i}") for i in range(4)])
    assert fake_servicebus.count(queue) == 5
    with client.get_queue_receiver(queue) as receiver:
        got = receiver.receive_messages(max_message_count=10, max_wait_time=5)
        assert [str(m) for m in got] == ["single", "batched-0", "batched-1", "batched-2", "batched-3"]
        first = got[0]
        assert first.application_properties == {b"a": b"1"}
        assert first.partition_key == "pk"
        assert [m.sequence_number for m in got] == [1, 2, 3, 4, 5]
        assert first.enqueued_time_utc is not None and first.locked_until_utc is not None
        assert not first.delivery_count  # no failed delivery yet
        receiver.complete_message(first)
        receiver.abandon_message(got[1])
        receiver.dead_letter_message(got[2], reason="bad", error_description="very bad")
        before = got[3].locked_until_utc
        assert receiver.renew_message_lock(got[3]) >= before
        receiver.complete_message(got[3])
        receiver.complete_message(got[4])
        (again,) = receiver.receive_messages(max_message_count=10, max_wait_time=5)
        assert str(again) == "batched-0" and again.delivery_count == 1
        receiver.complete_message(again)
    with client.get_queue_receiver(queue, sub_queue=ServiceBusSubQueue.DEAD_LETTER) as dead:
        (letter,) = dead.receive_messages(max_message_count=10, max_wait_time=5)
        assert str(letter) == "batched-1"
        assert (letter.dead_letter_reason, letter.dead_letter_error_description) == ("bad", "very bad")
        dead.complete_message(letter)
    assert fake_servicebus.count(queue) == 0


def test_lock_expiry_redelivers_and_max_delivery_count_dead_letters(
    fake_servicebus: FakeServiceBus, client: ServiceBusClient
) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue, lock_duration=0.5, max_delivery_count=2)
    with client.get_queue_sender(queue) as sender:
        sender.send_messages(ServiceBusMessage(b"poison"))
    with client.get_queue_receiver(queue) as receiver:
        (first,) = receiver.receive_messages(max_wait_time=5)
        deadline = time.monotonic() + 10
        while fake_servicebus.count(queue, "locked") and time.monotonic() < deadline:
            time.sleep(0.05)  # until the fake expires the lock
        assert fake_servicebus.count(queue, "locked") == 0
        with pytest.raises(MessageLockLostError):
            receiver.complete_message(first)
        (second,) = receiver.receive_messages(max_wait_time=5)
        assert second.delivery_count == 1 and second.sequence_number == first.sequence_number
        receiver.abandon_message(second)  # the second failed delivery: dead-lettered
        assert receiver.receive_messages(max_wait_time=1) == []
    (letter,) = fake_servicebus.dead_letters(queue)
    assert letter["body"] == b"poison"
    assert letter["properties"]["DeadLetterReason"] == "MaxDeliveryCountExceeded"


def test_schedule_cancel_peek_and_defer(fake_servicebus: FakeServiceBus, client: ServiceBusClient) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    with client.get_queue_sender(queue) as sender, client.get_queue_receiver(queue) as receiver:
        due = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=2)
        kept, cancelled = sender.schedule_messages(
            [ServiceBusMessage("kept"), ServiceBusMessage("cancelled")], due
        )
        sender.cancel_scheduled_messages(cancelled)
        late = ServiceBusMessage("by-property")
        late.scheduled_enqueue_time_utc = due
        sender.send_messages(late)
        sender.send_messages(ServiceBusMessage("now"))
        assert fake_servicebus.count(queue, "scheduled") == 2
        peeked = receiver.peek_messages(max_message_count=10)
        assert sorted(str(m) for m in peeked) == ["by-property", "kept", "now"]
        (now,) = receiver.receive_messages(max_message_count=1, max_wait_time=5)
        assert str(now) == "now"
        assert datetime.datetime.now(datetime.UTC) < due, "the machine is too slow for this test"
        receiver.defer_message(now)
        got = []
        deadline = time.monotonic() + 10
        while len(got) < 2 and time.monotonic() < deadline:
            got += receiver.receive_messages(max_message_count=10, max_wait_time=1)
        assert datetime.datetime.now(datetime.UTC) >= due
        assert sorted(str(m) for m in got) == ["by-property", "kept"]
        assert kept in {m.sequence_number for m in got}
        for message in got:
            receiver.complete_message(message)
        (deferred,) = receiver.receive_deferred_messages([now.sequence_number])
        assert str(deferred) == "now"
        receiver.complete_message(deferred)
    assert fake_servicebus.count(queue) == 0


def test_sessions_named_next_available_and_state(
    fake_servicebus: FakeServiceBus, client: ServiceBusClient
) -> None:
    queue = _name("sq")
    fake_servicebus.create_queue(queue, requires_session=True, lock_duration=5)
    with client.get_queue_sender(queue) as sender:
        sender.send_messages([ServiceBusMessage(f"a{i}", session_id="A") for i in range(3)])
        sender.send_messages([ServiceBusMessage(f"b{i}", session_id="B") for i in range(2)])
    with client.get_queue_receiver(queue, session_id="B") as receiver:
        got = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        assert [str(m) for m in got] == ["b0", "b1"]
        receiver.session.set_state(b"halfway")
        assert receiver.session.get_state() == b"halfway"
        assert receiver.session.renew_lock() is not None
        for message in got:
            receiver.complete_message(message)
    with client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=2) as receiver:
        assert receiver.session.session_id == "A"
        got = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        assert [str(m) for m in got] == ["a0", "a1", "a2"]
        receiver.abandon_message(got[0])
        (again,) = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        assert (str(again), again.delivery_count) == ("a0", 1)
        for message in [again, *got[1:]]:
            receiver.complete_message(message)
    with (
        pytest.raises(OperationTimeoutError),
        client.get_queue_receiver(queue, session_id=NEXT_AVAILABLE_SESSION, max_wait_time=0.5),
    ):
        pass


def test_topic_copies_to_every_subscription_and_receive_and_delete(
    fake_servicebus: FakeServiceBus, client: ServiceBusClient
) -> None:
    topic = _name("t")
    fake_servicebus.create_topic(topic, ["one", "two"])
    with client.get_topic_sender(topic) as sender:
        sender.send_messages([ServiceBusMessage(f"m{i}") for i in range(3)])
    with client.get_subscription_receiver(topic, "one") as receiver:
        got = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        assert [str(m) for m in got] == ["m0", "m1", "m2"]
        for message in got:
            receiver.complete_message(message)
    with client.get_subscription_receiver(
        topic, "two", receive_mode=ServiceBusReceiveMode.RECEIVE_AND_DELETE
    ) as receiver:
        got = receiver.receive_messages(max_message_count=10, max_wait_time=2)
        assert [str(m) for m in got] == ["m0", "m1", "m2"]
    assert fake_servicebus.count(f"{topic}/Subscriptions/one") == 0
    assert fake_servicebus.count(f"{topic}/Subscriptions/two") == 0


def test_missing_entities_and_oversized_messages(
    fake_servicebus: FakeServiceBus, client: ServiceBusClient
) -> None:
    with pytest.raises(MessagingEntityNotFoundError), client.get_queue_sender(_name("missing")) as sender:
        sender.send_messages(ServiceBusMessage(b"x"))
    queue = _name("small")
    fake_servicebus.create_queue(queue, max_message_size=1024)
    with client.get_queue_sender(queue) as sender:
        batch = sender.create_message_batch()
        assert batch.max_size_in_bytes == 1024
        with pytest.raises(MessageSizeExceededError):
            batch.add_message(ServiceBusMessage(b"x" * 2000))
        with pytest.raises(MessageSizeExceededError):
            sender.send_messages(ServiceBusMessage(b"x" * 2000))
    assert fake_servicebus.count(queue) == 0


async def test_the_aio_sdk_too(fake_servicebus: FakeServiceBus) -> None:
    queue = _name("q")
    fake_servicebus.create_queue(queue)
    async with AsyncServiceBusClient.from_connection_string(fake_servicebus.connection_string) as sdk:
        async with sdk.get_queue_sender(queue) as sender:
            await sender.send_messages([ServiceBusMessage(str(i)) for i in range(100)])
        async with sdk.get_queue_receiver(queue) as receiver:
            seen: list[int] = []
            while len(seen) < 100:
                batch = await receiver.receive_messages(max_message_count=50, max_wait_time=5)
                assert batch
                for message in batch:
                    if int(str(message)) == 7 and not message.delivery_count:
                        await receiver.abandon_message(message)
                        continue
                    await receiver.complete_message(message)
                    seen.append(int(str(message)))
            assert sorted(seen) == list(range(100))
    assert fake_servicebus.count(queue) == 0
