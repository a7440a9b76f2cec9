"""The moto server the SQS tests run against: a fake of SQS and SNS, not AWS (shared by the
integration and conformance tests)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest

from broker.backends.sqs import MotoServerNotFound, factory, moto_dev_server
from broker.connect import available_backends, register_backend
from broker.driver.devserver import ProcessServer

# An environment installed before the ``sqs`` entry point existed does not list it; the tests
# register the factory in this process then (a no-op once the installed metadata has it).
if "sqs" not in available_backends():
    register_backend("sqs", factory)


@contextmanager
def running_moto_server_fake(*, iam_checks: bool = False) -> Iterator[ProcessServer]:
    """A started moto server (the fake) on a free 127.0.0.1 port, stopped on exit (skips without one)."""
    try:
        server = moto_dev_server(iam_checks=iam_checks)
    except MotoServerNotFound as exc:
        pytest.skip(str(exc))
    with server:
        yield server
