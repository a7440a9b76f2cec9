"""The conformance kit: the suites every backend passes, and the harness they run on.

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

from broker.driver.testing.cloudevents import CloudEventsSuite
from broker.driver.testing.conformance import ConformanceSuite
from broker.driver.testing.harness import Harness, KillableServer, killable, need
from broker.driver.testing.typed import TypedSuite

__all__ = [
    "CloudEventsSuite",
    "ConformanceSuite",
    "Harness",
    "KillableServer",
    "TypedSuite",
    "killable",
    "need",
]
