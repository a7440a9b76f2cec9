"""The moto server the SQS tests run against: a fake of SQS and SNS, not AWS (shared by the
integration and conformance tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker.backends.sqs import MotoServerNotFound, moto_dev_server
from broker.driver.devserver import ProcessServer


@contextmanager
def running_moto_server_fake(*, iam_checks: bool = False) -> Iterator[ProcessServer]:
    """A started moto server (the fake) on a free 127.0.0.1 port, stopped on exit (skips without one)."""
    try:
        server = moto_dev_server(iam_checks=iam_checks)
    except MotoServerNotFound as exc:
        pytest.skip(str(exc))
    with server:
        yield server
