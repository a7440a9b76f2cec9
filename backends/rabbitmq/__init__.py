"""RabbitMQ backend (``rabbitmq://user:password@host:port/vhost``), on aio-pika.

Connect with ``broker.connect("rabbitmq://guest:guest@127.0.0.1:5672/")``; query parameters and
mapping keys fill :class:`~broker.backends.rabbitmq.settings.RabbitmqSettings`. A topic is a durable
exchange, a subscription the durable quorum queue ``<topic>.<subscription>`` bound to it
(:mod:`broker.backends.rabbitmq.backend` has the full mapping). ``factory.dev_server()``
(``broker dev rabbitmq``) starts a local ``rabbitmq-server`` on loopback.

This package root is the backend's registration (``factory``, the ``broker.backends`` entry point)
and its dev server; it imports no SDK: ``factory.open()`` imports ``aio_pika`` (the ``rabbitmq``
extra). The rest: ``settings`` (settings and names), ``mapping`` (messages, errors and topics in
AMQP terms), ``backend`` (the backend, its connection, the publish driver, the backlog) and
``consumer`` (the push driver and its acker).

The dev server needs Erlang's ``epmd`` and RabbitMQ's server script (Debian: ``apt-get install
rabbitmq-server``; the script is ``/usr/lib/rabbitmq/bin/rabbitmq-server``, because ``/usr/sbin``'s
wrapper switches to the ``rabbitmq`` user and ``/var/lib/rabbitmq``). Everything the node writes
(mnesia, logs, config, the Erlang cookie in ``HOME``) goes to a temporary directory, removed on
stop. Each server has its own node name, its own ``epmd`` (started first, in the foreground, so it
stops with the server) and its own AMQP, epmd and distribution ports, all on 127.0.0.1, so runs
never collide.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Self
from urllib.parse import unquote

from broker.backends.rabbitmq.settings import ConsumerOptions, RabbitmqSettings
from broker.driver.devserver import ProcessServer, StartedInWith, free_port, wait_for_port
from broker.driver.registration import BackendRegistration, one_host
from broker.driver.settings import ParsedUrl
from broker.errors import ConfigError, MissingDependency

__all__ = [
    "ConsumerOptions",
    "RabbitmqDevServer",
    "RabbitmqFactory",
    "RabbitmqServerNotFound",
    "RabbitmqSettings",
    "factory",
    "find_rabbitmq_server",
]


class RabbitmqFactory(BackendRegistration):
    """Builds :class:`~broker.backends.rabbitmq.backend.RabbitmqBackend` from ``rabbitmq://user:pass@host:port/vhost``."""

    extra = "rabbitmq"
    settings_type = RabbitmqSettings
    sdk = "aio_pika"
    backend = "broker.backends.rabbitmq.backend:RabbitmqBackend"
    mechanisms = {
        "persistent": "durable exchanges, quorum queues",
        "per_key_order": "queue order",
        "messages": "quorum queue per subscription",
        "nack_redelivers": "basic.nack requeue",
        "delayed_nack": "held by the client (emulated)",
        "ack_deadline": "client-side timer (emulated)",
        "in_progress": "timer restart (emulated)",
        "delivery_attempt": "x-delivery-count; classic queues: redelivered flag (1, then 2)",
        "dead_letter": "dead-letter exchange, x-delivery-limit (quorum queues)",
        "competing_consumers": "consumers of one queue",
    }

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        """Host and port from the URL's host, ``user:password@`` credentials, the path as vhost."""
        options: dict[str, Any] = {}
        address = one_host(url, "host")
        if address is not None:
            host, port = _host_port(address)
            options["host"] = host
            if port is not None:
                options["port"] = port
        options.update(url.credentials("user", "password", decode=True))
        path = url.path[1:] if url.path.startswith("/") else url.path
        if path:
            options["vhost"] = unquote(path)
        return options

    def dev_server(self, port: int | None = None) -> RabbitmqDevServer:
        """An unstarted local ``rabbitmq-server``; ``with factory.dev_server() as s: s.url``."""
        return RabbitmqDevServer(port)


def _host_port(host: str) -> tuple[str, int | None]:
    if host.startswith("["):
        name, _, rest = host[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        name, _, port = host.partition(":")
    if not port:
        return name, None
    if not port.isdigit():
        raise ConfigError(f"the port of a rabbitmq:// URL must be a number, got {port!r}")
    return name, int(port)


# -- the dev server --------------------------------------------------------------------
_SCRIPT_DIRS = ("/usr/lib/rabbitmq/bin", "/usr/local/lib/rabbitmq/bin")
_CONFIG = """\
listeners.tcp.default = {host}:{port}
log.file = false
log.console = true
log.console.level = warning
"""
_ADVANCED = "[{kernel, [{inet_dist_use_interface, {127,0,0,1}}]}].\n"


class RabbitmqServerNotFound(MissingDependency):
    """No ``rabbitmq-server`` script or ``epmd`` binary was found."""

    def __init__(self, what: str) -> None:
        self.extra = "rabbitmq"
        self.module = what
        Exception.__init__(
            self,
            f"no {what} was found; install RabbitMQ and Erlang "
            "(Debian/Ubuntu: apt-get install rabbitmq-server)",
        )


def find_rabbitmq_server() -> tuple[str, str]:
    """The paths of RabbitMQ's ``rabbitmq-server`` script and of ``epmd``."""
    scripts = [Path(d, "rabbitmq-server") for d in _SCRIPT_DIRS]
    script = next((str(p) for p in scripts if os.access(p, os.X_OK)), None) or shutil.which("rabbitmq-server")
    if script is None:
        raise RabbitmqServerNotFound("rabbitmq-server")
    epmd = shutil.which("epmd") or next(
        (str(p) for p in Path("/usr/lib/erlang").glob("erts-*/bin/epmd") if os.access(p, os.X_OK)), None
    )
    if epmd is None:
        raise RabbitmqServerNotFound("epmd (Erlang)")
    return script, epmd


class RabbitmqDevServer(StartedInWith):
    """A ``rabbitmq-server`` node and its ``epmd`` on 127.0.0.1; a context manager that stops both."""

    def __init__(
        self,
        port: int | None = None,
        start_timeout: float = 60.0,
        *,
        host: str = "127.0.0.1",
        command_prefix: Sequence[str] = (),
        config: str = "",
        advanced: str | None = None,
        plugins: Sequence[str] = (),
        node_name: str = "polybroker",
        more_ports: Sequence[int] = (),
    ) -> None:
        """``host``: where AMQP listens (a test's network namespace address; else loopback), with
        ``command_prefix`` (e.g. ``ip netns exec NS``) run before ``epmd`` and the node; the
        node's distribution stays on the loopback of wherever it runs.

        For tests that need more of the node: ``config`` is appended to its ``rabbitmq.conf``
        (later keys win), ``advanced`` replaces its ``advanced.config``, ``plugins`` are enabled,
        ``node_name`` prefixes the node's name, and ``start()`` also waits for ``more_ports``
        (other listeners the configuration opens, such as TLS)."""
        self.script, self.epmd = find_rabbitmq_server()
        self.host = host
        self.command_prefix = list(command_prefix)
        self.port = port or free_port()
        self.start_timeout = start_timeout
        self.config = config
        self.advanced = advanced
        self.plugins = list(plugins)
        self.node_name = node_name
        self.more_ports = list(more_ports)
        self._dir: Path | None = None
        self._ctl_env: dict[str, str] = {}
        self._epmd: ProcessServer | None = None
        self._server: ProcessServer | None = None

    @property
    def url(self) -> str:
        """``rabbitmq://guest:guest@127.0.0.1:PORT/`` (guest may log in over loopback)."""
        return f"rabbitmq://guest:guest@{self.host}:{self.port}/"

    def __repr__(self) -> str:
        return f"<RabbitmqDevServer {self.host}:{self.port} {'running' if self.running else 'stopped'}>"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._server is not None and self._server.running

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        return self._server.log_tail(lines) if self._server is not None else ""

    @property
    def node(self) -> ProcessServer | None:
        """The node's process (a :class:`~broker.driver.devserver.ProcessServer`), None before ``start()``.

        Fault tests pause, kill and restart it: ``node.restart()`` starts the node again with the
        same name, port and data directory, while ``epmd`` keeps running.
        """
        return self._server

    def start(self) -> Self:
        """Start ``epmd``, then the node; return once it accepts AMQP connections."""
        if self.running:
            return self
        base = self._dir = Path(tempfile.mkdtemp(prefix="polybroker-rabbitmq-"))
        host, epmd_port, dist_port = self.host, free_port(), free_port()
        loopback = "127.0.0.1"
        config = _CONFIG.format(host=host, port=self.port)
        if host != loopback:
            # guest logs in over loopback only; the other address is a test's private namespace link
            config += "loopback_users.guest = false\n"
        (base / "rabbitmq.conf").write_text(config + self.config)
        (base / "advanced.config").write_text(_ADVANCED if self.advanced is None else self.advanced)
        (base / "enabled_plugins").write_text(f"[{', '.join(self.plugins)}].\n")
        env = {
            "HOME": str(base),
            "ERL_EPMD_ADDRESS": loopback,
            "ERL_EPMD_PORT": str(epmd_port),
            "RABBITMQ_NODENAME": f"{self.node_name}{self.port}@localhost",
            "RABBITMQ_NODE_IP_ADDRESS": host,
            "RABBITMQ_NODE_PORT": str(self.port),
            "RABBITMQ_DIST_PORT": str(dist_port),
            "RABBITMQ_MNESIA_BASE": str(base / "mnesia"),
            "RABBITMQ_LOG_BASE": str(base / "log"),
            "RABBITMQ_CONFIG_FILE": str(base / "rabbitmq.conf"),
            "RABBITMQ_ADVANCED_CONFIG_FILE": str(base / "advanced.config"),
            "RABBITMQ_ENABLED_PLUGINS_FILE": str(base / "enabled_plugins"),
            "RABBITMQ_CONF_ENV_FILE": str(base / "rabbitmq-env.conf"),  # absent: skip /etc's
        }
        self._ctl_env = {
            name: env[name]
            for name in ("HOME", "ERL_EPMD_ADDRESS", "ERL_EPMD_PORT", "RABBITMQ_NODENAME")
        }
        try:
            # epmd listens on the loopback (where the node looks for it) and on ``host`` (where
            # this process checks that it started, when the two are in different namespaces).
            addresses = loopback if host == loopback else f"{loopback},{host}"
            self._epmd = ProcessServer(
                [*self.command_prefix, self.epmd, "-port", str(epmd_port), "-address", addresses],
                url=f"epmd://{host}:{epmd_port}",
                host=host,
                port=epmd_port,
                workdir=str(base),
                env={"ERL_EPMD_ADDRESS": addresses},
            ).start()
            self._server = ProcessServer(
                [*self.command_prefix, self.script],
                url=self.url,
                host=host,
                port=self.port,
                workdir=str(base),
                start_timeout=self.start_timeout,
                env=env,
            ).start()
            node = self._server
            for port in self.more_ports:
                wait_for_port(host, port, self.start_timeout, alive=lambda: node.running)
        except BaseException:
            self.stop()
            raise
        return self

    def ctl(self, *arguments: str, timeout: float = 60.0) -> str:
        """Run ``rabbitmqctl ARGUMENTS`` against this node (its name, cookie and ``epmd``) and
        return what it printed; a failure raises ``subprocess.CalledProcessError`` with its output.

        For tests that need what AMQP cannot do: users and their permissions
        (``ctl("add_user", "app", "pw")``, ``ctl("set_permissions", "app", "^$", ".*", ".*")``).
        """
        if not self.running:
            raise RuntimeError(f"{self!r} is not running")
        command = [*self.command_prefix, str(Path(self.script).with_name("rabbitmqctl")), *arguments]
        done = subprocess.run(
            command,
            env={**os.environ, **self._ctl_env},
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if done.returncode:
            raise subprocess.CalledProcessError(done.returncode, command, done.stdout, done.stderr)
        return done.stdout

    def kill(self) -> None:
        """SIGKILL the node's process tree (no shutdown); ``epmd`` keeps running until :meth:`stop`."""
        if self._server is not None:
            self._server.kill()

    def stop(self) -> None:
        """Stop the node, then ``epmd``; remove the temporary directory. Idempotent."""
        server, epmd, self._server, self._epmd = self._server, self._epmd, None, None
        if server is not None:
            server.stop(timeout=15.0)
        if epmd is not None:
            epmd.stop()
        base, self._dir = self._dir, None
        if base is not None:
            shutil.rmtree(base, ignore_errors=True)


factory = RabbitmqFactory()
