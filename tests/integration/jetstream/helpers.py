"""Small helpers shared by the JetStream integration tests."""

from __future__ import annotations

import uuid

from broker.backends.jetstream.backend import JetStreamBackend


def unique(prefix: str = "t") -> str:
    """A subject / consumer name not used before."""
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


async def stored(backend: JetStreamBackend, subject: str) -> int:
    """How many messages the stream of ``subject`` holds."""
    jsm = backend.connection.jsm
    assert jsm is not None
    info = await jsm.stream_info(await backend.provisioner.stream_for(subject))
    return int(info.state.messages)
