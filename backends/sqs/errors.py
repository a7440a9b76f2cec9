"""Translation of botocore exceptions into :mod:`broker.errors` (the original is chained).

AWS names the kind of a failure in the error code of a ``ClientError``; connection failures are
botocore exceptions of their own.
"""

from __future__ import annotations

from collections.abc import Callable

from botocore import exceptions as sdk

from broker import errors
from broker.driver.sdk_errors import ErrorRule, ErrorTable

__all__ = ["error_code", "translate"]


def error_code(exc: BaseException) -> str:
    """The AWS error code of a ``ClientError`` ("" for anything else)."""
    if isinstance(exc, sdk.ClientError):
        return str(exc.response.get("Error", {}).get("Code", ""))
    return ""


def _code(*codes: str) -> Callable[[BaseException], bool]:
    def check(exc: BaseException) -> bool:
        code = error_code(exc)
        return code in codes or any(code.endswith(c) for c in codes)

    return check


_AUTH_CODES = (
    "InvalidClientTokenId",
    "SignatureDoesNotMatch",
    "UnrecognizedClientException",
    "InvalidAccessKeyId",
    "ExpiredToken",
    "IncompleteSignature",
    "MissingAuthenticationToken",
)


def _refused_credentials(exc: BaseException) -> bool:
    """An AWS error code that refuses the credentials, also where botocore could not parse the
    answer's body (an XML error body to a JSON-protocol call: the code is then only in the text)."""
    code = error_code(exc)
    return code in _AUTH_CODES or (code == "403" and any(c in str(exc) for c in _AUTH_CODES))


def _denied(exc: BaseException) -> bool:
    """An AWS error code that denies the action to the credentials, also where botocore could not
    parse the answer's body (an XML ``AccessDenied`` body to a JSON-protocol SQS call: code 403)."""
    denials = ("AccessDenied", "AccessDeniedException", "AuthorizationError")
    return _code(*denials)(exc) or (error_code(exc) == "403" and any(c in str(exc) for c in denials))


_ERRORS = ErrorTable(
    ErrorRule(
        sdk.ClientError,
        errors.AuthenticationFailed,
        "AWS refused the credentials ({detail})",
        when=_refused_credentials,
    ),
    ErrorRule((sdk.NoCredentialsError, sdk.PartialCredentialsError), errors.AuthenticationFailed,
              "no AWS credentials were found (the standard chain, or access_key_id/secret_access_key)"),
    ErrorRule(sdk.ClientError, errors.PermissionDenied, "the credentials may not do this ({detail})",
              when=_denied),
    ErrorRule(sdk.ClientError, errors.UnknownTopic,
              when=_code("NonExistentQueue", "QueueDoesNotExist", "NotFound", "NotFoundException")),
    ErrorRule(sdk.ClientError, errors.Throttled, "AWS throttled the request ({detail})",
              when=_code("Throttling", "ThrottlingException", "RequestThrottled", "OverLimit")),
    ErrorRule(sdk.ClientError, errors.ConfigError,
              when=_code("InvalidParameterValue", "InvalidParameter", "InvalidAttributeName",
                         "InvalidAttributeValue", "InvalidMessageContents", "MessageTooLong",
                         "ValidationError", "InvalidParameterException")),
    ErrorRule((sdk.ReadTimeoutError, sdk.ConnectTimeoutError, TimeoutError), errors.Timeout,
              "no answer from AWS in time"),
    ErrorRule((sdk.EndpointConnectionError, sdk.ConnectionClosedError, sdk.HTTPClientError,
               ConnectionError, OSError), errors.ConnectionFailed),
)  # fmt: skip


def translate(
    exc: BaseException, doing: str, default: type[errors.BrokerError] = errors.BrokerError
) -> errors.BrokerError:
    """The :mod:`broker.errors` exception for a botocore exception raised while ``doing`` something.

    Broker errors are returned unchanged; anything unnamed gets ``default``. Raise it ``from exc``.
    """
    return _ERRORS.translate(exc, doing, default)
