"""The conformance suite on Amazon SQS/SNS, against moto's server: a fake of both services, not AWS.

No real SQS runs here. The fake counts time in whole seconds as AWS does, so the ack deadline is
one second and the receives long-poll one second.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

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
