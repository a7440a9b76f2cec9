"""Registry error responses as broker.errors classes, against a STUB of the registry's HTTP API.

The stub (tests/schema_registry_stub.py) answers canned responses; it is not a registry.
"""

from __future__ import annotations

import socket

import pytest

from broker import schemas
from broker.errors import AuthenticationFailed, ConnectionFailed, DecodeError, PermissionDenied, Throttled
from tests.schema_registry_stub import registry_stub
from tests.unit.schemas.support import ORDER_V1

ORDER = {"id": 1, "item": "a", "qty": 1}
SECRET = "s3cr3t-password"


def _registry(url: str, auth: bool = True) -> schemas.Registry:
    return schemas.Registry(url, basic_auth=("user", SECRET) if auth else None, max_retries=0, timeout=2.0)


@pytest.mark.parametrize(
    ("status", "code", "error"),
    [
        (404, 40401, schemas.SchemaNotFound),
        (409, 409, schemas.IncompatibleSchema),
        (422, 42201, schemas.InvalidSchema),
        (401, 40101, AuthenticationFailed),
        (403, 40301, PermissionDenied),
        (429, 42901, Throttled),
        (500, 50001, ConnectionFailed),
    ],
)
def test_register_error_responses_map_to_broker_errors(
    status: int, code: int, error: type[Exception]
) -> None:
    with registry_stub() as stub:
        stub.responses[("POST", "/subjects/orders-value/versions")] = (
            status,
            {"error_code": code, "message": "no"},
        )
        registry = _registry(stub.url)
        binding = schemas.avro(registry, ORDER_V1, topic="orders")
        with pytest.raises(error) as caught:
            binding.encode(ORDER)
        assert type(caught.value).__module__.startswith("broker.")
        assert caught.value.retryable == (status in (429, 500))
        assert SECRET not in str(caught.value) and SECRET not in repr(registry)
        assert stub.requests[0][2]  # the credentials were sent


def test_unknown_subject_on_lookup_and_unknown_id_on_decode() -> None:
    with registry_stub() as stub:
        registry = _registry(stub.url)
        with pytest.raises(schemas.SchemaNotFound):
            schemas.avro(registry, ORDER_V1, topic="orders", auto_register=False).encode(ORDER)
        stub.responses[("GET", "/schemas/ids/")] = (404, {"error_code": 40403, "message": "Schema not found"})
        with pytest.raises(DecodeError) as caught:
            schemas.avro(registry, ORDER_V1, topic="orders").decode(b"\x00\x00\x00\x00\x05\x02")
        assert isinstance(caught.value.__cause__, schemas.SchemaNotFound)


def test_unreachable_registry_is_retryable_connection_failed() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    registry = _registry(f"http://user:{SECRET}@127.0.0.1:{port}", auth=False)
    assert SECRET not in repr(registry)
    binding = schemas.avro(registry, ORDER_V1, topic="orders")
    with pytest.raises(ConnectionFailed) as caught:
        binding.encode(ORDER)
    assert caught.value.retryable and SECRET not in str(caught.value)
    # decoding: the registry's retryable error as it is, not a DecodeError
    with pytest.raises(ConnectionFailed):
        binding.decode(b"\x00\x00\x00\x00\x01\x02")
