"""``broker run TARGET``: serve a :class:`broker.App` in one process, in worker processes, or reloading.

``TARGET`` is ``pkg.module:app`` or ``path/to/file.py:app`` (the attribute defaults to ``app``).
The broker URL comes from ``--url``, else ``POLYBROKER_URL``; ``--url`` also replaces the URL the
app names for its default backend, so the command line overrides both the environment and the code.

With one worker and no ``--reload`` the app runs in this process (:meth:`broker.App.run`: the first
SIGTERM or SIGINT drains, a second cuts the drain short). Otherwise this process supervises
``python -m broker run TARGET`` children, each in a session of its own (a terminal's Ctrl-C reaches
the supervisor only, which hands it on once): the first signal is forwarded to every worker, which
drains; a second is forwarded again, cutting every drain short. A worker that exits on its own stops
the others, and the supervisor exits with the highest exit status (with ``--reload`` it waits for
the next file change instead, and starts them again). ``--reload`` watches the target's
directory for Python file changes (``watchfiles``, the ``reload`` extra) and restarts the workers
cleanly: they drain and exit, then new ones start on the new code.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import importlib.util
import json
import logging
import os
import signal
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from broker.app.application import DEFAULT_BACKEND, ENV_URL, App
from broker.driver.resources import stop_task
from broker.driver.settings import parse_url, redact_url
from broker.errors import ConfigError, MissingDependency

__all__ = [
    "Target",
    "asyncapi_command",
    "check_workers",
    "command",
    "load_app",
    "override_url",
    "parse_target",
    "serve",
    "supervise",
]

log = logging.getLogger("broker.cli.run")

#: The environment variable naming a worker's supervisor (its pid): a worker outliving it drains and exits.
_SUPERVISOR = "POLYBROKER_RUN_SUPERVISOR"

#: Schemes whose broker lives inside one process: several worker processes would not share it.
_IN_PROCESS = frozenset({"inmem"})


@dataclass(frozen=True, slots=True)
class Target:
    """Where an app is: a module name or a file path, and the attribute holding the :class:`App`."""

    module: str
    attribute: str
    #: The file for a ``path.py:app`` target (None for a module name).
    path: Path | None = None

    @property
    def watch_root(self) -> Path:
        """The directory ``--reload`` watches: the file's directory, or the working directory."""
        return self.path.parent if self.path is not None else Path.cwd()


def parse_target(text: str) -> Target:
    """``pkg.module:app`` or ``path/to/file.py:app`` (``:app`` optional); ``ConfigError`` otherwise."""
    if not isinstance(text, str) or not text.strip():
        raise ConfigError("a target is pkg.module:app or path/to/file.py:app, got an empty string")
    location, _, attribute = text.rpartition(":") if ":" in text else (text, "", "app")
    attribute = attribute or "app"
    if not attribute.isidentifier():
        raise ConfigError(f"target {text!r}: {attribute!r} is not an attribute name")
    if location.endswith(".py") or os.sep in location or "/" in location:
        path = Path(location).resolve()
        if not path.is_file():
            raise ConfigError(f"target {text!r}: no such file {str(path)!r}")
        return Target(path.stem, attribute, path)
    if not all(part.isidentifier() for part in location.split(".")):
        raise ConfigError(f"target {text!r}: {location!r} is neither a module name nor a .py file")
    return Target(location, attribute)


def load_app(target: Target | str) -> App:
    """Import the target's module and return its :class:`App` (``ConfigError`` when it is none).

    A file target's directory goes first on ``sys.path`` (so the file imports its neighbours, as
    ``python file.py`` lets it); a module target is imported with the working directory on it.
    """
    found = parse_target(target) if isinstance(target, str) else target
    if found.path is not None:
        directory = str(found.path.parent)
        if directory not in sys.path:
            sys.path.insert(0, directory)
        module = sys.modules.get(found.module)
        if module is None or Path(getattr(module, "__file__", "") or "").resolve() != found.path:
            spec = importlib.util.spec_from_file_location(found.module, found.path)
            if spec is None or spec.loader is None:
                raise ConfigError(f"cannot import {str(found.path)!r}")
            module = importlib.util.module_from_spec(spec)
            sys.modules[found.module] = module
            spec.loader.exec_module(module)
    else:
        if "" not in sys.path and os.getcwd() not in sys.path:
            sys.path.insert(0, os.getcwd())
        try:
            module = importlib.import_module(found.module)
        except ModuleNotFoundError as exc:
            if exc.name is not None and found.module.startswith(exc.name):
                raise ConfigError(f"no module named {found.module!r} (the target of broker run)") from exc
            raise
    app = getattr(module, found.attribute, None)
    if not isinstance(app, App):
        raise ConfigError(
            f"{found.module}:{found.attribute} is {type(app).__name__ if app is not None else 'missing'}, "
            "not a broker.App"
        )
    return app


def override_url(app: App, url: str | None) -> None:
    """Point the app's default backend at ``url`` (the command line wins over the code and env)."""
    if url is not None:
        parse_url(url)  # a ConfigError for something that is not a URL, before anything starts
        app.backend_specs[DEFAULT_BACKEND] = url


def _scheme(spec: str | Mapping[str, Any]) -> str:
    if isinstance(spec, str):
        return spec.partition("://")[0].lower()
    named = spec.get("backend") or str(spec.get("url", "")).partition("://")[0]
    return str(named).lower()


def check_workers(app: App, workers: int) -> None:
    """``ConfigError`` unless ``workers`` processes can share the app's brokers.

    Workers are processes of one consumer group (one subscription per subscriber); a broker that lives
    inside one process (``inmem://``) cannot be shared, so it allows one worker only.
    """
    if not isinstance(workers, int) or isinstance(workers, bool) or workers < 1:
        raise ConfigError(f"--workers must be an int >= 1, got {workers!r}")
    if workers == 1:
        return
    for name, spec in app.backend_specs.items():
        if _scheme(spec) in _IN_PROCESS:
            shown = redact_url(spec) if isinstance(spec, str) else "a settings mapping"
            raise ConfigError(
                f"--workers {workers} needs a broker the worker processes share; backend {name!r} is "
                f"{shown}, which lives inside one process (run one worker, or use a server broker)"
            )


async def serve(app: App, *, drain_timeout: float = 30.0) -> int:
    """Run ``app`` in this process until SIGTERM/SIGINT (drain; a second signal cuts it short).

    A worker of a supervisor that is gone (killed outright, so it could not hand a signal on)
    signals itself and drains, instead of running on unsupervised.
    """
    parent = os.environ.pop(_SUPERVISOR, None)
    watch = asyncio.create_task(_orphan_watch(int(parent))) if parent and parent.isdigit() else None
    try:
        return await app.run(drain_timeout=drain_timeout)
    finally:
        if watch is not None:
            watch.cancel()


async def _orphan_watch(parent: int) -> None:
    while True:  # polled: a parent's death raises no event a child can wait on
        if os.getppid() != parent:
            break
        await asyncio.sleep(1.0)
    log.warning("the supervisor (pid %d) is gone: draining", parent)
    os.kill(os.getpid(), signal.SIGTERM)


@dataclass
class _Workers:
    """The worker processes of one generation, and how they are told to stop."""

    processes: list[asyncio.subprocess.Process] = field(default_factory=list)
    signalled: int = 0

    def signal(self) -> None:
        self.signalled += 1
        for process in self.processes:
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.send_signal(signal.SIGTERM)

    async def first_exit(self) -> None:
        waits = [asyncio.ensure_future(p.wait()) for p in self.processes]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()

    async def wait(self) -> int:
        codes = await asyncio.gather(*(p.wait() for p in self.processes))
        return max((_status(c) for c in codes), default=0)


def _status(code: int) -> int:
    return 128 - code if code < 0 else code  # killed by a signal: the shell's convention


async def _start(command: Sequence[str], workers: int, env: Mapping[str, str]) -> _Workers:
    started = _Workers()
    for _ in range(workers):
        process = await asyncio.create_subprocess_exec(*command, env=dict(env), start_new_session=True)
        started.processes.append(process)
    log.info("started %d worker(s): %s", workers, ", ".join(str(p.pid) for p in started.processes))
    return started


def _reload_changes(root: Path, stop: asyncio.Event) -> Any:
    try:
        watchfiles = importlib.import_module("watchfiles")
    except ImportError as exc:
        raise MissingDependency("reload", "watchfiles", needed_by="broker run --reload") from exc
    return watchfiles.awatch(root, watch_filter=watchfiles.PythonFilter(), stop_event=stop)


async def supervise(
    target: str,
    *,
    workers: int,
    url: str | None,
    reload: bool,
    drain_timeout: float = 30.0,
    watch: Path | None = None,
) -> int:
    """Run ``workers`` worker processes of ``target`` until SIGTERM/SIGINT; restart them on a file
    change with ``reload``; the highest exit status of the workers' last generation.

    Each worker is ``python -m broker run TARGET --drain-timeout ...`` with ``POLYBROKER_URL`` set to
    ``url`` when given (the environment is otherwise passed on, so the app's own settings reach it).
    """
    found = parse_target(target)
    shown = f"{found.path}:{found.attribute}" if found.path is not None else target
    command = [sys.executable, "-m", "broker", "run", shown, "--drain-timeout", str(drain_timeout)]
    if url is not None:
        command += ["--url", url]
    env = dict(os.environ)
    env[_SUPERVISOR] = str(os.getpid())
    if url is not None:
        env[ENV_URL] = url
    if found.path is None:  # the workers import the module from here, as this process would
        env["PYTHONPATH"] = os.pathsep.join(p for p in (os.getcwd(), env.get("PYTHONPATH", "")) if p)
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    current = await _start(command, workers, env)

    def on_signal(signum: int) -> None:
        if stopping.is_set():
            log.warning("second signal %s: cutting the workers' drain short", signum)
        else:
            log.info("signal %s: draining %d worker(s)", signum, len(current.processes))
            stopping.set()
        current.signal()

    installed = []
    for signum in (signal.SIGTERM, signal.SIGINT):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(signum, on_signal, signum)
            installed.append(signum)
    watcher: asyncio.Task[None] | None = None
    changed = asyncio.Event()
    if reload:
        changes = _reload_changes(watch or found.watch_root, stopping)

        async def watch_changes() -> None:
            async for batch in changes:
                log.warning("%d file(s) changed (%s, ...): restarting", len(batch), sorted(batch)[0][1])
                changed.set()

        watcher = loop.create_task(watch_changes())
    try:
        while True:
            first = loop.create_task(current.first_exit())
            change = loop.create_task(changed.wait())
            stop = loop.create_task(stopping.wait())
            await asyncio.wait([first, change, stop], return_when=asyncio.FIRST_COMPLETED)
            for task in (first, change, stop):
                task.cancel()
            if stopping.is_set():  # on_signal handed the signal on to the workers
                return await current.wait()
            if first.done() and not first.cancelled():  # a worker ended on its own
                log.error("a worker exited: stopping the others")
                current.signal()
                code = await current.wait()
                if not reload:
                    return code
                log.error("workers stopped (status %d): waiting for a file change to start again", code)
                change = loop.create_task(changed.wait())
                stop = loop.create_task(stopping.wait())
                await asyncio.wait([change, stop], return_when=asyncio.FIRST_COMPLETED)
                change.cancel()
                stop.cancel()
                if stopping.is_set():
                    return code
            else:  # a reload: drain this generation, then start the next on the new code
                current.signal()
                code = await current.wait()
                if stopping.is_set():
                    return code
                log.info("workers drained (status %d): starting again", code)
            changed.clear()
            current = await _start(command, workers, env)
            if stopping.is_set():  # a signal came while they started
                current.signal()
    finally:
        stopping.set()
        await stop_task(watcher)
        for process in current.processes:  # only when the supervisor itself failed
            if process.returncode is None:
                with contextlib.suppress(ProcessLookupError):
                    process.kill()
                await process.wait()
        for signum in installed:
            loop.remove_signal_handler(signum)


async def command(args: Any) -> int:
    """``broker run``: load the target, apply ``--url``, check ``--workers``, then serve or supervise."""
    from broker.cli.commands import CommandError

    try:
        if args.url is not None:
            os.environ[ENV_URL] = args.url  # an app that reads POLYBROKER_URL at import sees it
        if args.workers == 1 and not args.reload:
            app = load_app(args.target)
            override_url(app, args.url)
            check_workers(app, 1)
            return await serve(app, drain_timeout=args.drain_timeout)
        app = load_app(args.target)  # the supervisor checks the target before any worker starts
        override_url(app, args.url)
        check_workers(app, args.workers)
        return await supervise(
            args.target,
            workers=args.workers,
            url=args.url,
            reload=args.reload,
            drain_timeout=args.drain_timeout,
        )
    except (ConfigError, MissingDependency) as exc:
        raise CommandError(f"{type(exc).__name__}: {exc}") from exc


async def asyncapi_command(args: Any) -> int:
    """``broker asyncapi``: write the target app's AsyncAPI 3.0 document (JSON, or YAML with ``--yaml``)."""
    from broker.app.asyncapi import document
    from broker.cli.commands import CommandError

    before = os.environ.get(ENV_URL)
    try:
        if args.url is not None:
            os.environ[ENV_URL] = args.url
        found = parse_target(args.target)
        app = load_app(found)
        kept = dict(app.backend_specs)
        override_url(app, args.url)
        try:
            written = document(app, title=args.title or found.module, version=args.app_version)
        finally:  # the app may be a module other code in this process uses: leave it as it was
            app.backend_specs.clear()
            app.backend_specs.update(kept)
        if args.yaml:
            try:
                yaml = importlib.import_module("yaml")
            except ImportError as exc:
                raise MissingDependency("asyncapi", "yaml", needed_by="broker asyncapi --yaml") from exc
            text = str(yaml.safe_dump(written, sort_keys=False, allow_unicode=True))
        else:
            text = json.dumps(written, indent=2) + "\n"
    except (ConfigError, MissingDependency) as exc:
        raise CommandError(f"{type(exc).__name__}: {exc}") from exc
    finally:
        if before is None:
            os.environ.pop(ENV_URL, None)
        else:
            os.environ[ENV_URL] = before
    if args.output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
    else:
        await asyncio.to_thread(Path(args.output).write_text, text, encoding="utf-8")
    return 0
