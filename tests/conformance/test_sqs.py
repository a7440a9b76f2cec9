"""The conformance suite on Amazon SQS/SNS, against moto's server: a fake of both services, not AWS.

No real SQS runs here. The fake counts time in whole seconds as AWS does, so the ack deadline is
one second and the receives long-poll one second. The slowest tests on the fake (:data:`FULL_ONLY`,
2.5 s and more each) are marked ``sqs_full``: ``make test-sqs`` runs them, ``make test`` leaves them out.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest

import broker
from broker.driver.devserver import ProcessServer
from broker.driver.testing import ConformanceSuite, Harness
from tests.integration.sqs.server import running_moto_server_fake


@pytest.fixture(scope="module")
def moto_server_fake() -> Iterator[ProcessServer]:
    with running_moto_server_fake() as server:
        yield server


class TestSqsSnsModeConformance(ConformanceSuite):
    """SNS mode: topics are SNS topics, subscriptions SQS queues subscribed to them."""

    @pytest.fixture
    async def harness(self, moto_server_fake: ProcessServer) -> AsyncIterator[Harness]:
        url = f"{moto_server_fake.url}&wait_time=1"
        async with broker.connect(url) as backend:
            yield Harness(
                backend,
                url=url,
                short_ack_deadline=1.0,  # whole seconds: the shortest visibility timeout
                patience=30.0,  # the fake answers one call in ~10-25 ms: 200 messages take seconds
                bad_urls=[
                    f"{moto_server_fake.url}&ack_deadline=soon",
                    f"{moto_server_fake.url}&wait_time=21",
                    f"{moto_server_fake.url}&mode=kinesis",
                    "sqs://us-east-1/a-path",
                    "sqs://US_EAST?wait_time=1",
                ],
                # no own_server: the fake keeps no state, so a killed and restarted one is empty
            )


#: Tests of the suite that take 2.5 s or more each on the fake: only ``make test-sqs`` runs them.
FULL_ONLY = (
    "test_batch_publish_delivers_every_message_once",
    "test_in_progress_extends_the_deadline",
    "test_ping_answers_and_a_wrong_host_fails_fast",
    "test_consumer_opened_before_its_topic_exists",
    "test_no_loss_across_consumer_restart",
    "test_retry_policy_retries_then_acks_once",
    "test_competing_consumers_split_the_work",
    "test_receiver_handles_all_and_nacks_on_cancel",
    "test_acked_message_is_not_redelivered",
    "test_open_close_publish_reopen",
    "test_backend_close_while_consumers_are_busy",
    "test_crashed_consumer_process_loses_nothing",
)


def _full_only(inherited: Callable[..., Any]) -> Callable[..., Any]:
    """``inherited`` as a test of this class alone, marked ``sqs_full`` (a mark on the suite's own
    function would reach every backend's class)."""
    if inspect.iscoroutinefunction(inherited):

        @functools.wraps(inherited)
        async def test(*args: Any, **kwargs: Any) -> Any:
            return await inherited(*args, **kwargs)

    else:

        @functools.wraps(inherited)
        def test(*args: Any, **kwargs: Any) -> Any:
            return inherited(*args, **kwargs)

    marked: Callable[..., Any] = pytest.mark.sqs_full(test)
    return marked


for _name in FULL_ONLY:
    setattr(TestSqsSnsModeConformance, _name, _full_only(getattr(ConformanceSuite, _name)))
