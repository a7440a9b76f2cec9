"""Session-scoped fixtures of the security tests: the run-time certificates and the secured servers.

Every server binds 127.0.0.1 on a free port and is started once per test session (per xdist worker
that needs it), on first use. Servers whose refusals are decided by the client alone (an expired
certificate, a certificate for another host name) are extra, small server processes presenting that
certificate; where a server is expensive to start (RabbitMQ), the same node offers those listeners.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from broker.driver.devserver import ProcessServer, free_port
from tests.security.certs import Pki, make_pki

#: Users of the secured NATS server: name -> password.
NATS_USERS = {"admin": "admin-pw", "producer": "producer-pw", "limited": "limited-pw"}
#: The token of the token-authenticated NATS server.
NATS_TOKEN = "nats-t0ken-for-tests"


@pytest.fixture(scope="session")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """The CAs and certificates, made for this session (see :mod:`tests.security.certs`)."""
    return make_pki(tmp_path_factory.mktemp("pki"))


# -- NATS ----------------------------------------------------------------------------------


@dataclass
class NatsServers:
    """The NATS servers of the security tests (host 127.0.0.1)."""

    #: TLS (server certificate from the trusted CA), JetStream, users with passwords and permissions.
    tls: ProcessServer
    #: Plain TCP, JetStream, the same users (credentials and permissions without TLS).
    plain: ProcessServer
    #: TLS that requires a client certificate from the trusted CA (``verify: true``).
    mutual: ProcessServer
    #: TLS with an expired server certificate.
    expired: ProcessServer
    #: TLS with a certificate for another host name.
    wrong_host: ProcessServer
    #: Plain TCP, token authentication (:data:`NATS_TOKEN`).
    token: ProcessServer
    #: Plain TCP, one user known by its NKEY public key; ``nkey_seed`` is that user's seed (made at
    #: run time with the ``nkeys`` package, as nsc would).
    nkey: ProcessServer
    nkey_seed: str


_NATS_AUTH = """
authorization {
  users = [
    {user: admin, password: admin-pw}
    # may publish (and use the JetStream API) but never pull: no consuming
    {user: producer, password: producer-pw,
     permissions: {publish: {deny: ["$JS.API.CONSUMER.MSG.NEXT.>"]}}}
    # may not publish to secret.> nor pull from the SECRET stream
    {user: limited, password: limited-pw,
     permissions: {publish: {deny: ["secret.>", "$JS.API.CONSUMER.MSG.NEXT.SECRET.>"]}}}
  ]
}
"""


def _nats(binary: str, workdir: Path, name: str, body: str, jetstream: bool) -> ProcessServer:
    port = free_port()
    directory = workdir / name
    directory.mkdir()
    config = directory / "nats.conf"
    text = f'listen: "127.0.0.1:{port}"\n' + body
    if jetstream:
        text += f'\njetstream {{ store_dir: "{directory / "js"}" }}\n'
    config.write_text(text)
    return ProcessServer(
        [binary, "-c", str(config)],
        url=f"nats://127.0.0.1:{port}",
        host="127.0.0.1",
        port=port,
        workdir=str(directory),
    )


def _tls_block(cert: Path, key: Path, ca: Path | None = None, verify: bool = False) -> str:
    lines = [f'cert_file: "{cert}"', f'key_file: "{key}"', "timeout: 2"]
    if ca is not None:
        lines.append(f'ca_file: "{ca}"')
    if verify:
        lines.append("verify: true")
    return "tls {\n  " + "\n  ".join(lines) + "\n}\n"


@pytest.fixture(scope="session")
def nats_servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[NatsServers]:
    """Six small nats-servers (0.02 s each to start): see :class:`NatsServers`."""
    from broker.backends.jetstream.devserver import NatsServerNotFound, find_nats_server

    try:
        binary = find_nats_server()
    except NatsServerNotFound as exc:
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("nats")
    server_tls = _tls_block(pki.server.cert, pki.server.key)
    nkeys = pytest.importorskip("nkeys", reason="the nkeys package (test extra) makes the NKEY user")
    seed = nkeys.encode_seed(os.urandom(32), nkeys.PREFIX_BYTE_USER).decode()
    public = nkeys.from_seed(seed.encode()).public_key.decode()
    servers = NatsServers(
        tls=_nats(binary, workdir, "tls", server_tls + _NATS_AUTH, jetstream=True),
        plain=_nats(binary, workdir, "plain", _NATS_AUTH, jetstream=True),
        mutual=_nats(
            binary, workdir, "mutual", _tls_block(pki.server.cert, pki.server.key, pki.ca, True), True
        ),
        expired=_nats(binary, workdir, "expired", _tls_block(pki.expired.cert, pki.expired.key), False),
        wrong_host=_nats(
            binary, workdir, "wrong", _tls_block(pki.wrong_host.cert, pki.wrong_host.key), False
        ),
        token=_nats(binary, workdir, "token", f'authorization {{ token: "{NATS_TOKEN}" }}\n', True),
        nkey=_nats(binary, workdir, "nkey", f"authorization {{ users = [ {{nkey: {public}}} ] }}\n", True),
        nkey_seed=seed,
    )
    started: list[ProcessServer] = []
    try:
        for name in ("tls", "plain", "mutual", "expired", "wrong_host", "token", "nkey"):
            server: ProcessServer = getattr(servers, name)
            started.append(server.start())
        yield servers
    finally:
        for server in started:
            server.stop()


# -- RabbitMQ ------------------------------------------------------------------------------

#: Users of the secured RabbitMQ node: name -> password (the client certificate's user logs in by EXTERNAL).
RABBITMQ_USERS = {"admin": "admin-pw", "producer": "producer-pw", "limited": "limited-pw"}

_RABBITMQ_CONF = """\
listeners.tcp.default = 127.0.0.1:{port}
listeners.ssl.default = 127.0.0.1:{tls_port}
auth_mechanisms.1 = PLAIN
auth_mechanisms.2 = AMQPLAIN
auth_mechanisms.3 = EXTERNAL
ssl_cert_login_from = common_name
load_definitions = {definitions}
log.file = false
log.console = true
log.console.level = warning
"""


def _rabbitmq_definitions(client_name: str) -> dict[str, object]:
    everything = {"configure": ".*", "write": ".*", "read": ".*"}
    users = [{"name": n, "password": p, "tags": ""} for n, p in RABBITMQ_USERS.items()]
    users.append({"name": client_name, "password": "", "tags": ""})
    permissions = [
        {"user": "admin", "vhost": "/", **everything},
        {"user": "admin", "vhost": "restricted", **everything},
        {"user": client_name, "vhost": "/", **everything},
        # may declare and publish, never read (no binding a queue to an exchange, no consuming)
        {"user": "producer", "vhost": "/", "configure": ".*", "write": ".*", "read": "^$"},
        # only exchanges and queues whose names start with "allowed."; no access to "restricted"
        {
            "user": "limited",
            "vhost": "/",
            "configure": r"^allowed\..*",
            "write": r"^allowed\..*",
            "read": r"^allowed\..*",
        },
    ]
    return {
        "users": users,
        "vhosts": [{"name": "/"}, {"name": "restricted"}],
        "permissions": permissions,
    }


class SecuredRabbitmq:
    """A rabbitmq-server node with a plain and a TLS listener, the EXTERNAL mechanism and the users above:
    a :class:`broker.backends.rabbitmq.RabbitmqDevServer` (own ``epmd``, every port on 127.0.0.1)
    given this configuration."""

    def __init__(
        self,
        pki: Pki,
        cert: object,
        workdir: Path,
        require_client_cert: bool = True,
        sni: dict[str, object] | None = None,
    ) -> None:
        self.port, self.tls_port = free_port(), free_port()
        self.pki, self.cert, self.base = pki, cert, workdir
        self.require_client_cert = require_client_cert
        #: Other certificates by the server name a client asks for (TLS SNI).
        self.sni = sni or {}
        self._node: Any = None

    def start(self) -> SecuredRabbitmq:
        """Start ``epmd`` and the node; return once both listeners accept connections."""
        import json

        from broker.backends.rabbitmq import RabbitmqDevServer
        from tests.security.certs import CLIENT_NAME

        self.base.mkdir(parents=True, exist_ok=True)
        definitions = self.base / "definitions.json"
        definitions.write_text(json.dumps(_rabbitmq_definitions(CLIENT_NAME)))
        pair = self.cert
        options = [
            f'{{cacertfile, "{self.pki.ca}"}}',
            f'{{certfile, "{pair.cert}"}}',  # type: ignore[attr-defined]
            f'{{keyfile, "{pair.key}"}}',  # type: ignore[attr-defined]
            "{verify, verify_peer}",
            f"{{fail_if_no_peer_cert, {str(self.require_client_cert).lower()}}}",
        ]
        if self.sni:  # another certificate for a client that asks for one of these names
            hosts = ", ".join(
                f'{{"{name}", [{{certfile, "{other.cert}"}}, {{keyfile, "{other.key}"}}]}}'  # type: ignore[attr-defined]
                for name, other in self.sni.items()
            )
            options.append(f"{{sni_hosts, [{hosts}]}}")
        self._node = RabbitmqDevServer(
            self.port,
            config=_RABBITMQ_CONF.format(port=self.port, tls_port=self.tls_port, definitions=definitions),
            advanced=(
                f"[{{rabbit, [{{ssl_options, [{', '.join(options)}]}}]}}, "
                "{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].\n"
            ),
            plugins=["rabbitmq_auth_mechanism_ssl"],
            node_name="polybrokersec",
            more_ports=[self.tls_port],
        ).start()
        return self

    def log_tail(self) -> str:
        """The node's last lines of output."""
        return str(self._node.log_tail()) if self._node is not None else ""

    def stop(self) -> None:
        """Stop the node, then ``epmd``. Idempotent."""
        node, self._node = self._node, None
        if node is not None:
            node.stop()


@dataclass
class RabbitmqServers:
    """The RabbitMQ nodes: the secured one, and one whose TLS port presents bad certificates."""

    main: SecuredRabbitmq
    #: Its TLS port presents the wrong-host certificate to a client that connects to 127.0.0.1 (no
    #: server name sent) and the expired one to a client that asks for ``localhost`` (TLS SNI).
    bad: SecuredRabbitmq


@pytest.fixture(scope="session")
def rabbitmq_servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RabbitmqServers]:
    """Two rabbitmq-server nodes started at once (about 7 s in all): see :class:`RabbitmqServers`."""
    from concurrent.futures import ThreadPoolExecutor

    from broker.backends.rabbitmq import RabbitmqServerNotFound

    base = tmp_path_factory.mktemp("rabbitmq")
    try:
        servers = RabbitmqServers(
            main=SecuredRabbitmq(pki, pki.server, base / "main"),
            bad=SecuredRabbitmq(
                pki, pki.wrong_host, base / "bad", require_client_cert=False, sni={"localhost": pki.expired}
            ),
        )
    except RabbitmqServerNotFound as exc:
        pytest.skip(str(exc))
    nodes = (servers.main, servers.bad)
    with ThreadPoolExecutor(len(nodes)) as pool:
        starts = [pool.submit(node.start) for node in nodes]
    try:
        for start in starts:
            start.result()
        yield servers
    finally:
        for node in nodes:
            node.stop()


# -- Kafka (Tansu) -------------------------------------------------------------------------


@pytest.fixture(scope="session")
def tansu_authenticating() -> Iterator[ProcessServer]:
    """Tansu with ``--authentication`` (SASL/SCRAM required), plain TCP on 127.0.0.1."""
    from broker.backends.kafka.devserver import tansu_server
    from broker.errors import MissingDependency

    try:
        server = tansu_server()
    except MissingDependency as exc:
        pytest.skip(str(exc))
    server.command.append("--authentication")
    with server:
        yield server


# -- a TLS listener that presents a chosen certificate ---------------------------------------


class TlsStub:
    """A TLS listener on 127.0.0.1 that presents one certificate, completes handshakes and closes.

    For the refusals a client decides alone (an untrusted CA, an expired certificate, a wrong host
    name) where the backend's test server cannot serve TLS: the client must refuse the handshake,
    promptly and with the reason. ``handshakes`` counts completed handshakes.
    """

    def __init__(self, cert: Path, key: Path, client_ca: Path | None = None) -> None:
        import socket
        import ssl
        import threading

        self.context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        self.context.load_cert_chain(str(cert), str(key))
        if client_ca is not None:  # mutual TLS: a client certificate from this CA is required
            self.context.load_verify_locations(str(client_ca))
            self.context.verify_mode = ssl.CERT_REQUIRED
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port: int = self.sock.getsockname()[1]
        self.handshakes = 0
        self._thread = threading.Thread(target=self._serve, name="tls-stub", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._handle, args=(conn,), daemon=True).start()

    def _handle(self, conn: object) -> None:
        import contextlib
        import socket

        assert isinstance(conn, socket.socket)
        conn.settimeout(5)
        with contextlib.suppress(Exception), conn:
            tls = self.context.wrap_socket(conn, server_side=True)
            self.handshakes += 1
            with tls:
                tls.recv(1024)

    def close(self) -> None:
        """Stop listening."""
        import contextlib
        import socket

        with contextlib.suppress(OSError):
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept()
        self.sock.close()
        self._thread.join(2)


@pytest.fixture(scope="session")
def tls_stubs(pki: Pki) -> Iterator[dict[str, TlsStub]]:
    """TLS listeners presenting the good, the expired and the wrong-host certificate, and one
    (``mutual``) that requires a client certificate from the trusted CA."""
    stubs = {
        "good": TlsStub(pki.server.cert, pki.server.key),
        "expired": TlsStub(pki.expired.cert, pki.expired.key),
        "wrong_host": TlsStub(pki.wrong_host.cert, pki.wrong_host.key),
        "mutual": TlsStub(pki.server.cert, pki.server.key, client_ca=pki.ca),
    }
    try:
        yield stubs
    finally:
        for stub in stubs.values():
            stub.close()


# -- Service Bus (the project's test server, with a TLS listener) --------------------------


def _tls_fake_servicebus(pair: object) -> object:
    """The project's Service Bus test server, in this process, listening with TLS (``pair``)."""
    import proton

    import tests.servicebus_fake.server as fake

    class TlsFakeServiceBus(fake.FakeServiceBus):
        """The test server whose AMQP listener speaks TLS with ``pair``."""

        def start(self) -> TlsFakeServiceBus:
            domain = proton.SSLDomain(proton.SSLDomain.MODE_SERVER)
            domain.set_credentials(str(pair.cert), str(pair.key), None)  # type: ignore[attr-defined]
            domain.set_peer_authentication(proton.SSLDomain.ANONYMOUS_PEER)
            plain = fake.Container

            class TlsContainer(plain):  # type: ignore[misc, valid-type]
                def listen(self, url: str, ssl_domain: object = None) -> object:
                    return super().listen(url, ssl_domain=domain)

            fake.Container = TlsContainer  # only while start() makes its listener
            try:
                super().start()
            finally:
                fake.Container = plain
            return self

    return TlsFakeServiceBus(0)


@pytest.fixture(scope="session")
def servicebus_tls(pki: Pki) -> Iterator[dict[str, Any]]:
    """Three TLS test servers (in this process): the good, the expired and the wrong-host certificate."""
    pytest.importorskip("proton", reason="python-qpid-proton (the Service Bus test server) is not installed")
    servers = {
        "good": _tls_fake_servicebus(pki.server),
        "expired": _tls_fake_servicebus(pki.expired),
        "wrong_host": _tls_fake_servicebus(pki.wrong_host),
    }
    started: list[Any] = []
    try:
        for server in servers.values():
            started.append(server.start())  # type: ignore[attr-defined]
        yield servers
    finally:
        for server in started:
            server.stop()


# -- Pulsar (pulsar-lite: no TLS, no authentication) ----------------------------------------


@pytest.fixture(scope="session")
def pulsar_lite_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ProcessServer]:
    """pulsar-lite on 127.0.0.1 (it accepts any credentials: it checks none)."""
    pytest.importorskip("pulsar", reason="the pulsar extra (pulsar-client) is not installed")
    from broker.backends.pulsar.devserver import pulsar_lite

    with pulsar_lite(workdir=str(tmp_path_factory.mktemp("pulsar"))) as server:
        yield server


# -- Redis -----------------------------------------------------------------------------------

#: ACL users of the secured redis-server: name -> password (the ``default`` user is off).
REDIS_USERS = {
    "admin": "admin-pw-r3d1s",
    "producer": "producer-pw-r3d1s",
    "limited": "limited-pw-r3d1s",
    "nostream": "nostream-pw-r3d1s",
}

_REDIS_ACL = """\
user default off
user admin on >{admin} ~* &* +@all
user producer on >{producer} ~* &* +@all -xreadgroup -xgroup
user limited on >{limited} ~allowed.* &* +@all
user nostream on >{nostream} ~* &* +@all -@stream
"""


@dataclass
class RedisServers:
    """The redis-servers of the security tests (host 127.0.0.1), ACL users :data:`REDIS_USERS` on each."""

    #: A plain port (``main.port``) and a TLS port (``main_tls_port``) without client certificates.
    main: ProcessServer
    main_tls_port: int
    #: TLS only, a client certificate from the trusted CA required (``tls-auth-clients yes``).
    mutual: ProcessServer
    #: TLS only, with an expired server certificate.
    expired: ProcessServer
    #: TLS only, with a certificate for another host name.
    wrong_host: ProcessServer


def _redis(
    workdir: Path, name: str, pki: Pki, pair: Any, *, plain: bool, clients: str
) -> tuple[ProcessServer, int]:
    """A redis-server with a TLS port (and a plain one when ``plain``), the ACL users from a file."""
    from broker.backends.redis.devserver import redis_dev_server

    directory = workdir / name
    directory.mkdir()
    acl = directory / "users.acl"
    acl.write_text(_REDIS_ACL.format(**REDIS_USERS))
    tls_port = free_port()
    tls = [
        "--tls-port", str(tls_port),
        "--tls-cert-file", str(pair.cert),
        "--tls-key-file", str(pair.key),
        "--tls-ca-cert-file", str(pki.ca),
        "--tls-auth-clients", clients,
        "--aclfile", str(acl),
    ]  # fmt: skip
    if plain:
        return redis_dev_server(data_dir=str(directory), arguments=tls), tls_port
    # TLS only: the server is waited for on its TLS port (``--port 0`` turns the plain one off)
    return redis_dev_server(tls_port, str(directory), arguments=[*tls, "--port", "0"]), tls_port


@pytest.fixture(scope="session")
def redis_servers(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisServers]:
    """Four small redis-servers (about 0.1 s each to start): see :class:`RedisServers`."""
    pytest.importorskip("redis", reason="the redis extra (redis-py) is not installed")
    from broker.backends.redis.devserver import RedisServerNotFound, find_redis_server

    try:
        find_redis_server()
    except RedisServerNotFound as exc:
        pytest.skip(str(exc))
    workdir = tmp_path_factory.mktemp("redis")
    main, main_tls_port = _redis(workdir, "main", pki, pki.server, plain=True, clients="no")
    servers = RedisServers(
        main=main,
        main_tls_port=main_tls_port,
        mutual=_redis(workdir, "mutual", pki, pki.server, plain=False, clients="yes")[0],
        expired=_redis(workdir, "expired", pki, pki.expired, plain=False, clients="no")[0],
        wrong_host=_redis(workdir, "wrong", pki, pki.wrong_host, plain=False, clients="no")[0],
    )
    started: list[ProcessServer] = []
    try:
        for server in (servers.main, servers.mutual, servers.expired, servers.wrong_host):
            started.append(server.start())
        yield servers
    finally:
        for server in started:
            server.stop()


# -- SQS/SNS (moto's server, a fake of AWS, serving TLS, its IAM checks on) -------------------

#: The IAM policy of the SQS user that may do everything but send to and receive from SQS queues.
SQS_DENY_POLICY = (
    '{"Version": "2012-10-17", "Statement": ['
    '{"Effect": "Allow", "Action": "*", "Resource": "*"},'
    '{"Effect": "Deny", "Action": ["sqs:SendMessage", "sqs:ReceiveMessage"], "Resource": "*"}]}'
)


@dataclass
class SqsTlsServer:
    """moto's server (the fake) with TLS (the trusted server certificate) and IAM checks on."""

    #: ``https://127.0.0.1:PORT``.
    endpoint: str
    #: Keys of an IAM user allowed everything (access key id, secret key).
    admin: tuple[str, str]
    #: Keys of an IAM user denied ``sqs:SendMessage`` and ``sqs:ReceiveMessage``.
    limited: tuple[str, str]


@pytest.fixture(scope="session")
def sqs_tls(pki: Pki) -> Iterator[SqsTlsServer]:
    """One moto server on 127.0.0.1 serving HTTPS with the trusted certificate; its first three
    requests (unauthenticated, as moto allows) make the two IAM users, every later one is checked."""
    pytest.importorskip("aiobotocore", reason="the sqs extra is not installed")
    import asyncio
    import ssl
    import sys
    import urllib.request

    from aiobotocore.session import get_session

    if importlib.util.find_spec("moto") is None:
        pytest.skip("moto's server (moto[server]) is not installed")
    port = free_port()
    endpoint = f"https://127.0.0.1:{port}"
    context = ssl.create_default_context(cafile=str(pki.ca))

    def ready() -> None:
        urllib.request.urlopen(f"{endpoint}/moto-api/", timeout=2, context=context).close()

    server = ProcessServer(
        [sys.executable, "-m", "broker.backends.sqs.motofake", "-H", "127.0.0.1", "-p", str(port),
         "-c", str(pki.server.cert), "-k", str(pki.server.key)],
        url=endpoint,
        host="127.0.0.1",
        port=port,
        env={"MOTO_PORT": str(port), "AWS_DEFAULT_REGION": "us-east-1", "INITIAL_NO_AUTH_ACTION_COUNT": "3"},
        ready=ready,
    )  # fmt: skip

    async def users() -> tuple[tuple[str, str], tuple[str, str]]:
        async with get_session().create_client(
            "iam",
            region_name="us-east-1",
            endpoint_url=endpoint,
            verify=str(pki.ca),
            aws_access_key_id="bootstrap",
            aws_secret_access_key="bootstrap",
        ) as iam:
            await iam.create_user(UserName="limited")  # 1: unauthenticated
            key = (await iam.create_access_key(UserName="limited"))["AccessKey"]  # 2
            await iam.put_user_policy(  # 3: from here on every request is checked
                UserName="limited", PolicyName="no-send-receive", PolicyDocument=SQS_DENY_POLICY
            )
            limited = (key["AccessKeyId"], key["SecretAccessKey"])
            admin_iam_key = await _sqs_admin(endpoint, pki, limited)
        return admin_iam_key, limited

    with server:
        admin, limited = asyncio.run(users())
        yield SqsTlsServer(endpoint=endpoint, admin=admin, limited=limited)


async def _sqs_admin(endpoint: str, pki: Pki, creator: tuple[str, str]) -> tuple[str, str]:
    """An IAM user with no policy restrictions beyond allowing everything, made by ``creator``."""
    from aiobotocore.session import get_session

    async with get_session().create_client(
        "iam",
        region_name="us-east-1",
        endpoint_url=endpoint,
        verify=str(pki.ca),
        aws_access_key_id=creator[0],
        aws_secret_access_key=creator[1],
    ) as iam:
        await iam.create_user(UserName="admin")
        key = (await iam.create_access_key(UserName="admin"))["AccessKey"]
        await iam.put_user_policy(
            UserName="admin",
            PolicyName="everything",
            PolicyDocument='{"Version": "2012-10-17", "Statement": '
            '[{"Effect": "Allow", "Action": "*", "Resource": "*"}]}',
        )
    return key["AccessKeyId"], key["SecretAccessKey"]
