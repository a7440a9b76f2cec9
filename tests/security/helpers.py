"""Small helpers shared by the security tests: bounded round trips and bounded refusals."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping
from typing import Any

import pytest

import broker
from broker import OutboundMessage
from broker.errors import BrokerError

__all__ = ["assert_no_leak", "expect_ping_refusal", "expect_refusal", "round_trip", "unique"]


def unique(prefix: str) -> str:
    """A name no other test of this session uses."""
    return f"{prefix}{os.urandom(4).hex()}"


async def round_trip(
    connect: str | Mapping[str, Any], topic: str, *, subscription: str | None = None, bound: float = 20.0
) -> None:
    """Publish one message to ``topic`` and consume it back through a new subscription, within ``bound`` s."""
    payload = os.urandom(8).hex().encode()
    async with asyncio.timeout(bound), broker.connect(connect) as backend:  # type: ignore[arg-type]
        subscription = subscription or unique("sub")
        async with backend.messages(topic, subscription) as consumer:
            await backend.publisher().topic(topic).publish(OutboundMessage(payload))
            while True:
                message = await consumer.next_message(timeout=bound)
                await message.ack()
                if message.data == payload:
                    return


async def expect_refusal(
    connect: str | Mapping[str, Any],
    error: type[BrokerError] | tuple[type[BrokerError], ...],
    match: str | None,
    *,
    topic: str = "security.refused",
    bound: float = 5.0,
    consume: bool = False,
) -> BrokerError:
    """Connect and publish (or consume): it must raise ``error`` (one of them, for a tuple) whose
    message matches ``match``
    within ``bound`` seconds (no retry loop, no hang). Returns the error."""
    started = time.monotonic()
    with pytest.raises(error, match=match) as caught:
        async with asyncio.timeout(bound + 5), broker.connect(connect) as backend:  # type: ignore[arg-type]
            if consume:
                async with backend.messages(topic, unique("sub")) as consumer:
                    await consumer.next_message(timeout=bound + 5)
            else:
                await backend.publisher().topic(topic).publish(OutboundMessage(b"x"), timeout=bound + 5)
    elapsed = time.monotonic() - started
    assert elapsed < bound, f"the refusal took {elapsed:.1f}s (bound {bound}s): {caught.value!r}"
    return caught.value


async def expect_ping_refusal(
    connect: str | Mapping[str, Any], error: type[BrokerError], match: str | None, *, bound: float = 5.0
) -> BrokerError:
    """``backend.ping(timeout=...)`` must raise ``error`` matching ``match`` within ``bound`` seconds,
    well before the ping's own timeout (twice ``bound``): the refusal itself, not a timeout."""
    started = time.monotonic()
    async with broker.connect(connect) as backend:  # type: ignore[arg-type]
        with pytest.raises(error, match=match) as caught:
            await backend.ping(timeout=2 * bound)
    elapsed = time.monotonic() - started
    assert elapsed < bound, f"the refused ping took {elapsed:.1f}s (bound {bound}s): {caught.value!r}"
    return caught.value


def assert_no_leak(error: BaseException, log_text: str, *secrets: str) -> None:
    """None of ``secrets`` is in ``error``, in any exception it chains (cause or context, SDK ones
    included), or in ``log_text`` (what was logged, DEBUG included)."""
    seen: set[int] = set()
    chain: BaseException | None = error
    shown = [log_text]
    while chain is not None and id(chain) not in seen:
        seen.add(id(chain))
        shown += [str(chain), repr(chain), repr(getattr(chain, "args", ()))]
        chain = chain.__cause__ or chain.__context__
    text = "\n".join(shown)
    for secret in secrets:
        assert secret not in text, f"a secret leaked into an error or a log line: {secret[:3]}..."
