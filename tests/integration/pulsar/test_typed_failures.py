"""Pulsar client refusals map to the typed errors a caller can act on (pulsar-lite has no auth)."""

from __future__ import annotations

import _pulsar  # type: ignore[import-not-found]
import pytest

from broker.backends.pulsar.errors import translate
from broker.errors import AuthenticationFailed, BrokerError, PermissionDenied, Throttled


@pytest.mark.parametrize(
    ("sdk", "expected", "retryable"),
    [
        ("AuthenticationError", AuthenticationFailed, False),
        ("ErrorGettingAuthenticationData", AuthenticationFailed, False),
        ("AuthorizationError", PermissionDenied, False),
        ("ProducerBlockedQuotaExceededError", Throttled, True),
        ("ProducerBlockedQuotaExceededException", Throttled, True),
        ("TooManyLookupRequestException", Throttled, True),
    ],
)
def test_refusals_are_typed(sdk: str, expected: type[BrokerError], retryable: bool) -> None:
    error = translate(getattr(_pulsar, sdk)("refused"), "publishing", BrokerError)
    assert type(error) is expected and error.retryable is retryable
