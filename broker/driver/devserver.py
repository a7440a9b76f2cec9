"""Start a broker server process on loopback, for tests and for ``broker dev``.

Every backend whose server can run locally offers a ``dev_server()`` on its registered
factory, built on :class:`ProcessServer`: start the server's binary on a free 127.0.0.1
port, wait until it accepts connections, and stop it (terminate, then kill) on exit. Fault
tests also pause and resume it (SIGSTOP/SIGCONT of its process tree), kill it, and restart it
on the same port and working directory (so the same storage).
"""

from __future__ import annotations

import abc
import contextlib
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from types import TracebackType
from typing import Protocol, Self, runtime_checkable

from broker.errors import ConnectionFailed

__all__ = ["DevServer", "ProcessServer", "StartedInWith", "free_port", "wait_for_port"]


@runtime_checkable
class DevServer(Protocol):
    """A running local server: its URL, and ``stop()``."""

    @property
    def url(self) -> str:
        """The URL ``broker.connect`` takes to reach this server."""

    def stop(self) -> None:
        """Stop the server (idempotent)."""

    def __enter__(self) -> Self: ...

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None: ...


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port on ``host`` that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def wait_for_port(host: str, port: int, timeout: float, alive: Callable[[], bool] = lambda: True) -> None:
    """Wait until ``host:port`` accepts TCP connections; ``ConnectionFailed`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not alive():
            raise ConnectionFailed(f"the server process exited before {host}:{port} opened")
        with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=0.5):
            return
        time.sleep(0.02)
    raise ConnectionFailed(f"nothing accepted connections on {host}:{port} within {timeout}s")


def _accepts(host: str, port: int) -> bool:
    """True when ``host:port`` accepts a TCP connection right now."""
    try:
        with socket.create_connection((host, port), timeout=0.2):
            return True
    except OSError:
        return False


class StartedInWith(abc.ABC):
    """A server that ``with`` starts and stops: ``with server as s:`` runs ``start()``, then ``stop()``."""

    @abc.abstractmethod
    def start(self) -> Self:
        """Start the server; return it once it accepts connections."""

    @abc.abstractmethod
    def stop(self) -> None:
        """Stop the server (idempotent)."""

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()


class ProcessServer(StartedInWith):
    """A server subprocess with a URL; a context manager that stops it on exit.

    ``command`` is run with its output captured to a log file in ``workdir`` (a temporary
    directory removed on stop unless one was given), which ``log_tail()`` returns for errors.
    """

    def __init__(
        self,
        command: Sequence[str],
        *,
        url: str,
        host: str,
        port: int,
        workdir: str | None = None,
        start_timeout: float = 15.0,
        env: dict[str, str] | None = None,
        ready: Callable[[], None] | None = None,
    ) -> None:
        self.command = list(command)
        self._url = url
        self.host = host
        self.port = port
        self._own_dir = workdir is None
        self._workdir = Path(workdir) if workdir is not None else None
        self.start_timeout = start_timeout
        self.env = env
        self._ready = ready
        self.process: subprocess.Popen[bytes] | None = None
        self._paused = False
        self._stopped: list[int] = []

    @property
    def workdir(self) -> Path:
        """The server's working directory (a temporary one is made on first use)."""
        if self._workdir is None:
            self._workdir = Path(tempfile.mkdtemp(prefix="polybroker-dev-"))
        return self._workdir

    @property
    def _log_path(self) -> Path:
        return self.workdir / "server.log"

    @property
    def url(self) -> str:
        """The server's URL."""
        return self._url

    def __repr__(self) -> str:
        state = "running" if self.running else "stopped"
        return f"<ProcessServer {Path(self.command[0]).name} {self.host}:{self.port} {state}>"

    @property
    def running(self) -> bool:
        """True while the process is alive."""
        return self.process is not None and self.process.poll() is None

    def start(self) -> Self:
        """Start the process and wait until it serves."""
        if self.running:
            return self
        self._paused = False
        log = open(self._log_path, "ab")  # the child process writes to it
        try:
            self.process = subprocess.Popen(
                self.command,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                cwd=self.workdir,
                env={**os.environ, **self.env} if self.env else None,
                start_new_session=True,
            )
        finally:
            log.close()
        try:
            wait_for_port(self.host, self.port, self.start_timeout, alive=lambda: self.running)
            if self._ready is not None:
                self._ready()
        except BaseException as exc:
            tail = self.log_tail()
            self.stop()
            if isinstance(exc, ConnectionFailed):
                raise ConnectionFailed(f"{exc}; server output:\n{tail}") from None
            raise
        return self

    def log_tail(self, lines: int = 30) -> str:
        """The last lines the server printed."""
        try:
            return "\n".join(self._log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""

    @property
    def pid(self) -> int | None:
        """The server process's id (also its process group's id), or None when it is not running."""
        return self.process.pid if self.running and self.process is not None else None

    def process_tree(self) -> list[int]:
        """The ids of the server's processes: its process group and every descendant of it (some
        servers start helpers in sessions of their own, e.g. Erlang's ``erl_child_setup``).

        Read from ``/proc`` (Linux); just the server's own id where ``/proc`` is not available.
        """
        pid = self.pid
        if pid is None:
            return []
        parents: dict[int, tuple[int, int]] = {}  # pid -> (parent pid, process group)
        with contextlib.suppress(OSError):
            for entry in os.listdir("/proc"):
                if entry.isdigit():
                    with contextlib.suppress(OSError, ValueError, IndexError):
                        with open(f"/proc/{entry}/stat", encoding="ascii", errors="replace") as stat:
                            fields = stat.read().rsplit(")", 1)[1].split()
                        parents[int(entry)] = (int(fields[1]), int(fields[2]))
        members = {p for p, (_, group) in parents.items() if group == pid} | {pid}
        grown = True
        while grown:
            children = {p for p, (parent, _) in parents.items() if parent in members} - members
            members |= children
            grown = bool(children)
        return sorted(members)

    def _signal_tree(self, sig: signal.Signals, pids: Sequence[int]) -> None:
        """Send ``sig`` to the process group and to each of ``pids``."""
        process = self.process
        if process is not None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
        for pid in pids:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, sig)

    @property
    def paused(self) -> bool:
        """True between :meth:`pause` and :meth:`resume` (or a restart)."""
        return self._paused

    def pause(self) -> None:
        """SIGSTOP the server's whole process tree: it keeps its sockets but answers nothing."""
        if self.pid is None:
            raise ConnectionFailed(f"{self!r} is not running: nothing to pause")
        self._stopped = self.process_tree()
        self._signal_tree(signal.SIGSTOP, self._stopped)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT the server's process tree after :meth:`pause` (idempotent)."""
        stopped, self._stopped = self._stopped, []
        if self.pid is not None or stopped:
            self._signal_tree(signal.SIGCONT, stopped)
        self._paused = False

    def restart(self) -> Self:
        """SIGKILL the process group (:meth:`kill`), then start the same command again on the same
        port with the same working directory (so the same storage); return once it serves."""
        self.kill()
        return self.start()

    def kill(self) -> None:
        """SIGKILL the server's whole process tree at once (no shutdown); the workdir stays, so
        :meth:`start` can start it again on the same port and storage. Idempotent."""
        process = self.process
        if process is not None and process.poll() is None:
            self._signal_tree(signal.SIGKILL, self.process_tree())
            process.wait()
            # A killed multi-threaded process (Erlang's beam) can hold its listening socket for a
            # moment while it exits: return once the port is free for a new server.
            deadline = time.monotonic() + 10.0
            while time.monotonic() < deadline and _accepts(self.host, self.port):
                time.sleep(0.02)
        self._stopped = []
        self._paused = False

    def stop(self, timeout: float = 5.0) -> None:
        """Terminate the process (kill after ``timeout``); remove a temporary workdir. Idempotent."""
        process, self.process = self.process, None
        if process is not None and process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGTERM)
            if self._paused:  # a stopped process only sees the SIGTERM once it runs again
                self.resume()
            try:
                process.wait(timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout)
        if self._own_dir and self._workdir is not None:
            shutil.rmtree(self._workdir, ignore_errors=True)
            self._workdir = None
