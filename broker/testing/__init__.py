"""The conformance suite every backend must pass.

A backend's test module subclasses :class:`ConformanceSuite` and provides a ``harness``
fixture returning a :class:`Harness` (or a subclass adapting option names)::

    class TestInmem(ConformanceSuite):
        @pytest.fixture
        async def harness(self):
            async with broker.connect("inmem://t") as backend:
                yield Harness(backend)

Tests are gated by ``backend.capabilities``: a test for a feature the backend does not claim
is skipped, naming the flag. Needs pytest and pytest-asyncio (the ``test`` extra).
"""

from broker.testing.cloudevents import CloudEventsSuite
from broker.testing.conformance import ConformanceSuite
from broker.testing.harness import Harness, collect, drain, wait_until
from broker.testing.typed import TypedSuite

__all__ = ["CloudEventsSuite", "ConformanceSuite", "Harness", "TypedSuite", "collect", "drain", "wait_until"]
