"""Bad Pulsar, NATS and Service Bus URLs, mappings and connection strings: a ConfigError from connect().

Every case here used to be accepted, or to fail with a plain ``ValueError`` (or at the first publish)
instead of :class:`broker.errors.ConfigError` when ``broker.connect()`` is called. Nothing here
reaches a server: each backend connects lazily, so a good target opens without one.
"""

from __future__ import annotations

import pytest

import broker
from broker.errors import ConfigError

pytest.importorskip("nats")
pytest.importorskip("pulsar")
pytest.importorskip("azure.servicebus")

KEY = "SharedAccessKeyName=RootManageSharedAccessKey;SharedAccessKey=c2VjcmV0LWtleQ=="

BAD = [
    # NATS
    "nats://[::1:4222",
    "nats://[::1]x",
    "nats://::1:4222",
    "nats://127.0.0.1:99999",
    "nats://127.0.0.1:0",
    "nats://127.0.0.1:port",
    "nats://:4222",
    "nats://a,:4222",
    "nats://127.0.0.1:4222?ack_wait=soon",
    "nats://127.0.0.1:4222?prefetch=0",
    "nats://127.0.0.1:4222?connect_timeout=-1",
    "nats://127.0.0.1:4222?max_deliver=0",
    "nats://127.0.0.1:4222?deliver_policy=sometimes",
    "nats://127.0.0.1:4222/bad.stream",
    {"backend": "nats", "servers": ["nats://[::1:4222"]},
    {"backend": "nats", "servers": ["nats://h:70000"]},
    {"backend": "nats", "servers": ["127.0.0.1:4222"]},
    {"backend": "nats", "servers": ["http://127.0.0.1:4222"]},
    {"backend": "nats", "servers": ["nats://:4222"]},
    {"backend": "nats", "servers": []},
    # Pulsar
    "pulsar://[::1:6650",
    "pulsar://127.0.0.1:65536",
    "pulsar://:6650",
    "pulsar://a:6650,:6651",
    "pulsar://127.0.0.1:6650/a/path",
    "pulsar://127.0.0.1:6650?receiver_queue_size=lots",
    "pulsar://127.0.0.1:6650?receiver_queue_size=0",
    "pulsar://127.0.0.1:6650?subscription_type=round_robin",
    "pulsar://127.0.0.1:6650?ack_timeout=1",
    "pulsar://127.0.0.1:6650?max_attempts=1",
    "pulsar://127.0.0.1:6650?operation_timeout=0",
    {"backend": "pulsar", "service_url": "pulsar://h:99999"},
    {"backend": "pulsar", "service_url": "pulsar://[::1:6650"},
    {"backend": "pulsar", "service_url": "pulsar://h:6650/path"},
    {"backend": "pulsar", "service_url": "http://h:6650"},
    {"backend": "pulsar", "service_url": "pulsar://"},
    "pulsar://[::1]:6650",  # pulsar-client 3.13 takes no IPv6 literal ("invalid hostname")
    # Service Bus: connection strings
    "Endpoint=garbage",
    "Endpoint=",
    f"Endpoint=sb://;{KEY}",
    f"Endpoint=http://ns.servicebus.windows.net/;{KEY}",
    f"Endpoint=sb://ns.servicebus.windows.net:99999/;{KEY}",
    f"Endpoint=sb://[::1:5672;{KEY}",
    f"Endpoint=sb://ns.servicebus.windows.net/;{KEY};NotAPair",
    f"Endpoint=sb://ns.servicebus.windows.net/;{KEY};Endpoint=sb://other/",
    "Endpoint=sb://ns.servicebus.windows.net/",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKey=c2VjcmV0",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=Root",
    f"Endpoint=sb://ns.servicebus.windows.net/;{KEY};SharedAccessSignature=SharedAccessSignature sr=x",
    f"Endpoint=sb://ns.servicebus.windows.net/;{KEY};UseDevelopmentEmulator=maybe",
    {"backend": "servicebus", "connection_string": "not a connection string"},
    # Service Bus: servicebus:// URLs
    "servicebus://",
    "servicebus://ns",
    "servicebus://:5671?sas_token=x",
    "servicebus://ns:99999?sas_token=x",
    "servicebus://[::1?sas_token=x",
    "servicebus://a,b?sas_token=x",
    "servicebus://ns/queue?sas_token=x",
    "servicebus://ns?sas_token=x&retry_total=-1",
    "servicebus://ns?sas_token=x&prefetch=-1",
    "servicebus://ns?sas_token=x&batch_size=5001",
    "servicebus://ns?sas_token=x&receive_mode=whenever",
]

GOOD = [
    "nats://127.0.0.1:4222",
    "nats://[::1]:4222",
    "nats://a:4222,b:4223",
    "nats://user:pw@127.0.0.1:4222?ack_wait=10",
    {"backend": "nats", "servers": ["tls://h:4222", "ws://h:8080"]},
    "pulsar://127.0.0.1:6650",
    "pulsar://a,b:6651?ack_timeout=10",
    f"Endpoint=sb://ns.servicebus.windows.net/;{KEY}",
    f"Endpoint=sb://127.0.0.1:5672;{KEY};UseDevelopmentEmulator=true",
    "Endpoint=sb://ns.servicebus.windows.net/;SharedAccessSignature=SharedAccessSignature sr=x&sig=y&se=1",
    "servicebus://ns?sas_token=x",
    "servicebus://Root:c2VjcmV0@ns.servicebus.windows.net",
]


def _id(target: object) -> str:
    return str(target)[:60]


@pytest.mark.parametrize("target", BAD, ids=_id)
def test_bad_target_is_a_config_error_from_connect(target: str | dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        broker.connect(target)


@pytest.mark.parametrize("target", GOOD, ids=_id)
async def test_good_target_opens(target: str | dict[str, object]) -> None:
    backend = broker.connect(target)
    await backend.close()


def test_connection_string_errors_never_show_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        broker.connect("Endpoint=sb://ns:99999;SharedAccessKeyName=Root;SharedAccessKey=hunter2secret")
    assert "hunter2secret" not in str(caught.value)
    with pytest.raises(ConfigError) as caught:
        broker.connect("Endpoint=sb://ns;SharedAccessKeyName=Root;SharedAccessKey=hunter2secret;junk")
    assert "hunter2secret" not in str(caught.value)
