"""Service Bus SDK refusals map to the typed errors a caller can act on (the fake refuses nothing)."""

from __future__ import annotations

import pytest
from azure.servicebus import exceptions as sb

from broker.backends.servicebus.errors import translate
from broker.errors import AuthenticationFailed, BrokerError, ConnectionFailed, PermissionDenied, Throttled


@pytest.mark.parametrize(
    ("sdk", "expected", "retryable"),
    [
        (sb.ServiceBusAuthenticationError, AuthenticationFailed, False),
        (sb.ServiceBusAuthorizationError, PermissionDenied, False),
        (sb.ServiceBusQuotaExceededError, Throttled, True),
        (sb.ServiceBusServerBusyError, Throttled, True),
        (sb.ServiceBusConnectionError, ConnectionFailed, True),
    ],
)
def test_refusals_are_typed(sdk: type[Exception], expected: type[BrokerError], retryable: bool) -> None:
    error = translate(sdk(message="refused"), "publishing", BrokerError)
    assert type(error) is expected and error.retryable is retryable
