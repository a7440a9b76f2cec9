"""The conformance suite on the Pub/Sub backend, against Google's emulator.

Pub/Sub's shortest ack deadline is 10 s, so the deadline tests take 10-25 s each. The harness
is the base one: topics and subscriptions are created by the backend when a consumer is entered.

Two configurations run:

* ``TestPubsubConformance``: message ordering on (keys are ordering keys) and a dead-letter
  policy (which makes Pub/Sub count delivery attempts) — the whole suite but one test;
* ``TestPubsubUnorderedConformance``: no ordering, no dead-letter policy — the consumer tests
  that need no keys, among them ``test_no_loss_across_consumer_restart``. The emulator treats
  messages *without* an ordering key on an ordering subscription as one ordered sequence: when
  one of them expires, it redelivers every later one, acked or not (the real service applies
  this only to messages sharing a key). So that test runs on unordered subscriptions only.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

import broker
from broker.driver.devserver import ProcessServer
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.integration.pubsub.conftest import shared_emulator, stop_shared_emulator

BAD_URLS = [
    "pubsub://",
    "pubsub://a,b",
    "pubsub://p?ack_deadline=5",
    "pubsub://p?max_delivery_attempts=2",
    "pubsub://p?credentials_file=/x&credentials_json={}",
]

#: The emulator redelivers an expired message about 0.1 s after its 10 s deadline
#: (test_ack_deadline_redelivers takes 10.1-10.2 s): 2 s covers that on a loaded machine, so a
#: "not redelivered" check waits 12 s, not 2.5 deadlines.
REDELIVERY_SLACK = 2.0


@contextmanager
def own_emulator() -> Iterator[KillableServer]:
    """An emulator for one test, which it may kill."""
    from broker.backends.pubsub.registration import factory

    with factory.dev_server() as server:
        yield killable(server, f"{server.url}&publish_timeout=4&close_timeout=4&pull_timeout=4&rpc_timeout=4")


@pytest.fixture(scope="module")
def emulator() -> Iterator[ProcessServer]:
    yield shared_emulator()
    stop_shared_emulator()


class TestPubsubConformance(ConformanceSuite):
    @pytest.fixture
    async def harness(self, emulator: ProcessServer) -> AsyncIterator[Harness]:
        url = f"{emulator.url}&message_ordering=true&dead_letter_topic=conformance-dead-letters"
        async with broker.connect(url) as backend:
            yield Harness(
                backend,
                url=url,
                short_ack_deadline=10.0,
                redelivery_slack=REDELIVERY_SLACK,
                patience=10.0,
                bad_urls=BAD_URLS,
            )

    async def test_no_loss_across_consumer_restart(self, harness: Harness) -> None:
        pytest.skip("emulator quirk with key-less messages on ordering subscriptions; run unordered below")

    async def test_backend_close_while_consumers_are_busy(self, harness: Harness) -> None:
        pytest.skip("emulator quirk with key-less messages on ordering subscriptions; run unordered below")

    async def test_crashed_consumer_process_loses_nothing(self, harness: Harness) -> None:
        pytest.skip(
            "emulator quirk: on ordering subscriptions it redelivers acked key-less messages once a "
            "crashed consumer's leases expire (tests/integration/pubsub/test_ordering.py::"
            "test_emulator_does_not_redeliver_acked_keyless_messages); run unordered below"
        )

    async def test_dead_letter_after_max_attempts(self, harness: Harness) -> None:
        pytest.skip("the emulator does not dead-letter on ordering subscriptions; run unordered below")

    async def test_every_operation_after_the_server_died(self, harness: Harness) -> None:
        pytest.skip("needs a server of its own; runs once, unordered, below")


class TestPubsubUnorderedConformance:
    """The consumer tests that need no keys, on subscriptions without ordering or dead-lettering."""

    @pytest.fixture
    async def harness(self, emulator: ProcessServer) -> AsyncIterator[Harness]:
        async with broker.connect(emulator.url) as backend:
            yield Harness(
                backend,
                url=emulator.url,
                short_ack_deadline=10.0,
                redelivery_slack=REDELIVERY_SLACK,
                patience=10.0,
                bad_urls=BAD_URLS,
                own_server=own_emulator,
                dead_server_bound=12.0,
            )

    test_no_loss_across_consumer_restart = ConformanceSuite.test_no_loss_across_consumer_restart
    test_nack_redelivers = ConformanceSuite.test_nack_redelivers
    test_competing_consumers_split_the_work = ConformanceSuite.test_competing_consumers_split_the_work
    test_receiver_handles_all_and_nacks_on_cancel = (
        ConformanceSuite.test_receiver_handles_all_and_nacks_on_cancel
    )
    test_batched_messages = ConformanceSuite.test_batched_messages
    test_backend_close_while_consumers_are_busy = ConformanceSuite.test_backend_close_while_consumers_are_busy
    test_round_trip_data_key_attributes = ConformanceSuite.test_round_trip_data_key_attributes
    test_consumer_opened_before_its_topic_exists = (
        ConformanceSuite.test_consumer_opened_before_its_topic_exists
    )
    test_open_close_publish_reopen = ConformanceSuite.test_open_close_publish_reopen
    test_receiver_with_a_handler_that_always_fails = (
        ConformanceSuite.test_receiver_with_a_handler_that_always_fails
    )
    test_crashed_consumer_process_loses_nothing = ConformanceSuite.test_crashed_consumer_process_loses_nothing
    test_portable_option_names = ConformanceSuite.test_portable_option_names
    test_dead_letter_after_max_attempts = ConformanceSuite.test_dead_letter_after_max_attempts
    test_every_operation_after_the_server_died = ConformanceSuite.test_every_operation_after_the_server_died
