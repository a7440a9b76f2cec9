"""Registry error responses as broker.errors classes, against a STUB of the registry's HTTP API.

The stub (tests/schema_registry_stub.py) answers canned responses; it is not a registry.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest

import broker
from broker import OutboundMessage, schemas
from broker.errors import (
    AuthenticationFailed,
    ConnectionFailed,
    DecodeError,
    PermissionDenied,
    Throttled,
    Timeout,
)
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


@contextmanager
def silent_registry() -> Iterator[tuple[str, list[socket.socket]]]:
    """A registry URL whose server accepts connections and never answers; the accepted sockets."""
    accepted: list[socket.socket] = []
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.05)
    stop = threading.Event()

    def accept() -> None:
        while not stop.is_set():
            try:
                accepted.append(server.accept()[0])
            except OSError:
                continue

    thread = threading.Thread(target=accept, name="silent-registry", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.getsockname()[1]}", accepted
    finally:
        stop.set()
        thread.join(5)
        server.close()
        for conn in accepted:
            conn.close()


def loop_stall(read: Callable[[], object], error: type[Exception], reads: int) -> float:
    """The longest time (seconds) the event loop is held by one of ``reads`` calls of ``read()``
    on it, each raising ``error`` (a retryable one): only the reads themselves are timed, so the
    scheduling of other tasks on a loaded host does not count."""
    stalls: list[float] = []
    for _ in range(reads):
        start = time.perf_counter()
        with pytest.raises(error) as caught:
            read()
        stalls.append(time.perf_counter() - start)
        assert getattr(caught.value, "retryable", False)
    return max(stalls)


async def test_silent_registry_fails_decoded_without_blocking_the_loop() -> None:
    # Reading ``decoded`` after the consumer's off-loop lookup failed raises the registry's
    # retryable error at once: no second request from the event-loop thread, no loop lag; the
    # next fetch looks the schema up again (off the loop), and no message is lost.
    timeout = 0.5
    payloads = [b"\x00\x00\x00\x00\x07" + bytes([i]) for i in range(2)]
    with silent_registry() as (url, accepted):
        registry = schemas.Registry(url, timeout=timeout, max_retries=0)
        binding = schemas.avro(registry, ORDER_V1)
        async with broker.connect(f"inmem://silent-{uuid.uuid4().hex}") as backend:
            async with schemas.messages(backend.messages("orders", "s"), binding) as consumer:
                for data in payloads:
                    await backend.publisher().topic("orders").publish(OutboundMessage(data))
                got: list[Any] = []
                for expected_requests in (1, 2):
                    message = await consumer.next_message(timeout=30)
                    got.append(message)
                    async with asyncio.timeout(10):  # the accepting thread may lag on a loaded host
                        while len(accepted) < expected_requests:  # noqa: ASYNC110 - counting connections
                            await asyncio.sleep(0.01)
                    assert len(accepted) == expected_requests  # the lookup, made off the loop
                    stall = loop_stall(lambda m=message: m.decoded, Timeout, reads=2)
                    assert len(accepted) == expected_requests, "decoded asked the registry on the loop"
                    # a lookup from the loop would hold it for the whole request timeout (0.5 s)
                    assert stall < 0.4, f"the event loop stalled {stall:.2f} s"
                assert [m.data for m in got] == payloads
                assert len({m.id for m in got}) == 2


async def test_remembered_registry_failure_is_retried_off_the_loop_and_raised_fresh() -> None:
    # A lookup that failed in the consumer's worker thread is remembered for the event loop only:
    # ``decoded`` on the loop raises a fresh error of the same class chained from it, while a
    # decode off the loop (a worker thread, blocking code) asks the registry again and recovers.
    data = b"\x00\x00\x00\x00\x07\x02\x02a\x02"  # ORDER under schema id 7
    with registry_stub() as stub:
        stub.responses[("GET", "/schemas/ids/")] = (500, {"error_code": 50001, "message": "down"})
        binding = schemas.avro(_registry(stub.url), ORDER_V1)
        async with broker.connect(f"inmem://recover-{uuid.uuid4().hex}") as backend:
            async with schemas.messages(backend.messages("orders", "s"), binding) as consumer:
                await backend.publisher().topic("orders").publish(OutboundMessage(data))
                message = await consumer.next_message(timeout=30)
                lookups = len(stub.requests)
                raised = []
                for _ in range(2):
                    with pytest.raises(ConnectionFailed) as caught:
                        _ = message.decoded
                    raised.append(caught.value)
                assert len(stub.requests) == lookups, "decoded asked the registry on the loop"
                assert raised[0] is not raised[1]
                assert raised[0].__cause__ is raised[1].__cause__
                assert isinstance(raised[0].__cause__, ConnectionFailed)
                stub.responses[("GET", "/schemas/ids/")] = (200, {"schema": ORDER_V1})
                assert await asyncio.to_thread(binding.decode, data) == ORDER
                assert message.decoded == ORDER
                await message.ack()
