"""A session-scoped Google Pub/Sub emulator for the Pub/Sub tests.

The emulator is started once per test session through the backend factory's ``dev_server()``
on a free 127.0.0.1 port. Its address reaches the clients only through the URL's
``emulator_host`` setting: ``PUBSUB_EMULATOR_HOST`` is never set in this process. Without the
emulator the tests fail (never skip) with a message naming the Debian package
``google-cloud-cli-pubsub-emulator``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from broker.driver.devserver import ProcessServer

_server: ProcessServer | None = None


def shared_emulator() -> ProcessServer:
    """The session's emulator, started on first use (also used by the conformance module)."""
    global _server
    if _server is None or not _server.running:
        from broker.backends.pubsub.emulator import EmulatorNotFound
        from broker.backends.pubsub.registration import factory

        try:
            server = factory.dev_server()
        except EmulatorNotFound as exc:
            pytest.fail(str(exc), pytrace=False)
        server.start()
        _server = server
    return _server


def stop_shared_emulator() -> None:
    """Stop the session's emulator (idempotent)."""
    global _server
    server, _server = _server, None
    if server is not None:
        server.stop()


@pytest.fixture(scope="session")
def pubsub_emulator() -> Iterator[ProcessServer]:
    """The running emulator; ``pubsub_emulator.url`` is a ``pubsub://`` URL that reaches it."""
    server = shared_emulator()
    yield server
    stop_shared_emulator()
