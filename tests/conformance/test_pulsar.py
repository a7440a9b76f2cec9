"""The conformance suite on Pulsar (pulsar-lite unless ``PULSAR_URL`` names a real cluster)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import contextmanager

import pytest

import broker
from broker.backends.pulsar.backend import PulsarBackend
from broker.backends.pulsar.registration import factory
from broker.backends.pulsar.settings import MIN_ACK_TIMEOUT
from broker.driver.testing import ConformanceSuite, Harness
from broker.driver.testing.harness import KillableServer, killable
from tests.integration.pulsar.server import (
    KEY_SHARED_CHURN,
    KEY_SHARED_CHURN_DUPLICATES,
    KEY_SHARED_DUPLICATES,
    PulsarTestServer,
    pulsar_server,
)


class PulsarHarness(Harness):
    """Pulsar's timings: the suite runs through the public API with the portable option names."""

    #: The shortest ack timeout the Pulsar client accepts.
    short_ack_deadline = MIN_ACK_TIMEOUT
    #: The client's ack-timeout tracker ticks once a second: test_ack_deadline_redelivers sees the
    #: message back about 1 s after its 10 s deadline; 3 s covers that on a loaded machine, so a
    #: "not redelivered" check waits 13 s, not 2.5 deadlines.
    redelivery_slack = 3.0
    patience = 15.0


#: Rounds of the competing-consumers test on a pulsar-lite Key_Shared subscription: its duplicate
#: delivery shows in about a third of the rounds (fewer on a loaded machine: 20 rounds once all
#: passed, and in one CI run of 2026-11-27 all 60 did: strict XPASSes that failed the run), so up to
#: 200 rounds; they stop at the first duplicate, so the usual run is a few rounds.
_KEY_SHARED_ROUNDS = 200

#: Tests whose Pulsar path is the same for every subscription type (and that wait for ack timeouts).
_SAME_AS_SHARED = frozenset(
    {
        "test_acked_message_is_not_redelivered",
        "test_ack_deadline_redelivers",
        "test_every_operation_after_the_server_died",
    }
)


#: Lifecycle and dead-letter tests run on shared subscriptions only (see the fixture).
_LIFECYCLE_ON_SHARED = frozenset(
    {
        "test_consumer_opened_before_its_topic_exists",
        "test_nack_redelivers_on_a_topic_created_after_the_consumer",
        "test_open_close_publish_reopen",
        "test_publish_before_any_subscription",
        "test_receiver_with_a_handler_that_always_fails",
        "test_backend_close_while_consumers_are_busy",
        "test_crashed_consumer_process_loses_nothing",
        "test_portable_option_names",
        "test_dead_letter_after_max_attempts",
        "test_retry_policy_retries_then_acks_once",
        "test_retry_poison_message_reaches_the_dead_letter_topic",
    }
)


@contextmanager
def own_pulsar() -> Iterator[KillableServer]:
    """A pulsar-lite for one test, which it may kill."""
    with factory.dev_server() as server:
        yield killable(server, f"{server.url}?operation_timeout=4&send_timeout=4&connection_timeout=2")


@pytest.fixture(scope="module")
def pulsar() -> Iterator[PulsarTestServer]:
    yield from pulsar_server()


class TestPulsarConformance(ConformanceSuite):
    @pytest.fixture(params=["shared", "key_shared"])
    async def harness(
        self, request: pytest.FixtureRequest, pulsar: PulsarTestServer
    ) -> AsyncIterator[Harness]:
        kind = request.param
        if kind == "key_shared":
            test = request.node.originalname
            if test in _SAME_AS_SHARED:
                pytest.skip("the ack-timeout path does not depend on the subscription type: run on shared")
            if test in _LIFECYCLE_ON_SHARED:
                pytest.skip(
                    "open/close/crash orders do not depend on the subscription type (and pulsar-lite's "
                    f"Key_Shared consumer churn bug would hide them: {KEY_SHARED_CHURN}): run on shared"
                )
            if test == "test_no_loss_across_consumer_restart":
                pulsar.expect_bug(request, KEY_SHARED_CHURN)
            if test in ("test_batch_publish_delivers_every_message_once", "test_per_key_order"):
                pulsar.expect_bug(request, KEY_SHARED_CHURN_DUPLICATES)
        url = f"{pulsar.url}?nack_redelivery_delay=0.2&subscription_type={kind}"
        async with broker.connect(url) as backend:
            yield PulsarHarness(
                backend,
                url=url,
                bad_urls=[
                    "pulsar://127.0.0.1:6650/a/path",
                    "pulsar://127.0.0.1:6650?ack_timeout=1",
                    "pulsar://127.0.0.1:6650?subscription_type=round_robin",
                    "pulsar://127.0.0.1:6650?max_attempts=1",
                ],
                own_server=own_pulsar if pulsar.lite else None,
                dead_server_bound=12.0,
            )

    async def test_competing_consumers_split_the_work(
        self, harness: Harness, request: pytest.FixtureRequest, pulsar: PulsarTestServer
    ) -> None:
        """On pulsar-lite's Key_Shared, a strict xfail: the broker now and then delivers a message twice.

        The defect is reproduced with the raw client in
        ``tests/integration/pulsar/test_broker_bugs.py::test_key_shared_delivers_each_message_once``.
        It shows in some rounds only, so the suite's test runs up to ``_KEY_SHARED_ROUNDS`` times
        and is expected to fail in one of them; against Apache Pulsar it runs once.
        """
        base = super().test_competing_consumers_split_the_work
        backend = harness.backend
        assert isinstance(backend, PulsarBackend)
        if not pulsar.lite or backend.settings.subscription_type != "key_shared":
            await base(harness)
            return
        pulsar.expect_bug(request, KEY_SHARED_DUPLICATES, strict=True)
        for _ in range(_KEY_SHARED_ROUNDS):
            await base(harness)
