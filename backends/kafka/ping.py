"""``KafkaBackend.ping``: one metadata round trip on a client of its own, refusals reported at once.

librdkafka retries a refused login, an unreachable bootstrap list and a rejected certificate until
a request's timeout, and tells why only through ``error_cb``. The ping's admin client serves that
callback itself (``poll``, on a worker thread) while its ``describe_cluster`` request is out, so a
wrong password or host becomes a typed error as soon as librdkafka knows, not after the timeout.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from typing import Any

from broker.backends.kafka import sdk
from broker.backends.kafka.errors import is_refusal, translate
from broker.errors import ConnectionFailed

__all__ = ["ping"]

#: Seconds one ``poll`` of the ping's client may block its worker thread.
_POLL = 0.05


async def ping(config: dict[str, Any], timeout: float) -> None:
    """Ask the cluster for its metadata with the client ``config`` (``common_config``), within ``timeout``.

    Raises ``AuthenticationFailed`` when the broker refuses the login or client certificate,
    ``ConnectionFailed`` when every bootstrap broker is down or the certificate is rejected, and
    the translated error of the request otherwise.
    """
    reported: list[Any] = []
    user_callback = config.get("error_cb")

    def on_error(error: Any) -> None:
        reported.append(error)
        if user_callback is not None:
            user_callback(error)

    ck = sdk.confluent()
    client = sdk.admin_module().AdminClient({**config, "error_cb": on_error})
    future = client.describe_cluster(request_timeout=timeout)
    try:
        while not future.done():
            await asyncio.to_thread(client.poll, _POLL)
            refusal = next((e for e in reported if is_refusal(e)), None)
            down = next((e for e in reported if e.name() == "_ALL_BROKERS_DOWN"), None)
            if refusal is not None:
                raise translate(refusal, "pinging Kafka", ConnectionFailed)
            if down is not None:
                last = next((e for e in reversed(reported) if e.name() != "_ALL_BROKERS_DOWN"), down)
                raise translate(
                    last, "pinging Kafka: no broker of the bootstrap list answers", ConnectionFailed
                )
        try:
            future.result()
        except ck.KafkaException as exc:
            raise translate(exc, "pinging Kafka", ConnectionFailed) from exc
    finally:
        threading.Thread(target=_release, args=(client, future, timeout), daemon=True).start()
        del client


def _release(client: Any, future: concurrent.futures.Future[Any], timeout: float) -> None:
    """Drop the ping's client on a worker thread once its request is answered (or ``timeout``
    passed): librdkafka's teardown never runs on the event loop nor under its own request."""
    concurrent.futures.wait([future], timeout=timeout)
    del client
