"""The Pulsar client's own log lines, through ``logging`` with repeats held back.

The C++ client (pulsar-client) prints its log lines to stdout by itself, past ``logging``: with
the broker away, ``Failed to establish connection ... Connection refused`` several times a second.
The backend points the client at :data:`BRIDGE` instead, which logs them to the
``broker.backends.pulsar.libpulsar`` logger: the first line of each template (the client's source
line and the message with its numbers blanked: ports, ids, delays), then at most one per
:data:`REPEAT_INTERVAL` seconds, carrying the count of the lines held back before it
(``(N similar lines suppressed)``); lines still held back when a window ends are reported by the
last of them with their count. Each record has ``pulsar_source`` (``ClientConnection:485``).

Why a pipe, not a Python logger: the client calls a Python logger on its own threads, taking the
GIL, for every line at every level (it counts a Python logger as enabled for all of them) - about
five debug lines per message published or consumed, which measured 2-5 times slower on those paths -
and such calls have hung processes at shutdown (apache/pulsar#11847,
apache/pulsar-client-python#116). So the client gets its file logger, which filters levels in C++,
writing into a pipe (``/dev/fd/N``), and a daemon thread of ours reads the pipe and logs: no client
thread ever runs Python or waits for the GIL. The pipe holds :data:`PIPE_SIZE` bytes (thousands of
lines) should the thread fall behind; past that the client's writes wait for it. At exit the thread
logs what is left, waiting at most :data:`EXIT_FLUSH` seconds, and discards later lines.

The client keeps the logger (and level) of the first client made in the process for every later
one, so there is one bridge per process.
"""

from __future__ import annotations

import atexit
import contextlib
import logging
import os
import re
import select
import threading
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

__all__ = [
    "BRIDGE",
    "EXIT_FLUSH",
    "PIPE_SIZE",
    "REPEAT_INTERVAL",
    "RepeatLimiter",
    "SdkLogBridge",
    "parse",
    "sdk_log",
    "suppressed",
    "template",
]

#: Where the client's lines go.
sdk_log = logging.getLogger("broker.backends.pulsar.libpulsar")

#: Seconds after a line of a template was logged during which its repeats are held back.
REPEAT_INTERVAL: Final = 10.0
#: Bytes the pipe from the client holds (Linux; elsewhere the system's default).
PIPE_SIZE: Final = 1024 * 1024
#: Seconds the logging thread may take at exit to log what it still holds.
EXIT_FLUSH: Final = 1.0
#: Templates followed at once; lines of templates beyond these are logged without holding back.
MAX_TEMPLATES: Final = 1000

_LEVELS: Final = {
    "DEBUG": logging.DEBUG,
    "INFO": logging.INFO,
    "WARN": logging.WARNING,
    "ERROR": logging.ERROR,
}
#: A line of the client's file logger: ``2024-01-15 14:12:08.947 WARN  [1402] ProducerImpl:128 | message``.
_LINE: Final = re.compile(
    r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ (DEBUG|INFO|WARN|ERROR) +\[[^\]]*\] ([^ ]+:\d+) \| (.*)"
)
_NUMBER: Final = re.compile(r"\d+")

K = TypeVar("K", bound=Hashable)


def template(message: str) -> str:
    """What the repeats of a line share: ``message`` with every number replaced by ``#``."""
    return _NUMBER.sub("#", message)


def suppressed(line: str, count: int) -> str:
    """``line`` with the count of the similar lines held back before it."""
    if count == 0:
        return line
    return f"{line} ({count} similar line{'' if count == 1 else 's'} suppressed)"


def parse(line: str) -> tuple[int, str, str] | None:
    """``(logging level, source, message)`` of a line of the client's file logger; None for another line."""
    match = _LINE.fullmatch(line)
    if match is None:
        return None
    level, source, message = match.groups()
    return _LEVELS[level], source, message.rstrip()


@dataclass(slots=True)
class _Window:
    opened: float
    held: int = 0
    last: str = ""


class RepeatLimiter(Generic[K]):
    """Lets the first line of each key through, then at most one per ``interval`` seconds.

    :meth:`admit` says whether a line is logged and how many of its key were held back before it;
    :meth:`due` hands out, for each key whose window is over, the count and last of the lines held
    back since (the summary counts as the window's one line); :meth:`flush` all of them, over or not.
    ``clock`` (seconds, monotonic) is injectable for tests. Not thread-safe: one thread uses it.
    """

    def __init__(
        self,
        interval: float = REPEAT_INTERVAL,
        *,
        clock: Callable[[], float] = time.monotonic,
        max_keys: int = MAX_TEMPLATES,
    ) -> None:
        if interval < 0 or max_keys < 1:
            raise ValueError("interval must be >= 0 and max_keys >= 1")
        self.interval = interval
        self._clock = clock
        self._max_keys = max_keys
        self._windows: dict[K, _Window] = {}

    def __len__(self) -> int:
        return len(self._windows)

    def admit(self, key: K, line: str) -> int | None:
        """None: hold ``line`` back (counted). Else log it, with this count of lines held back before it."""
        now = self._clock()
        window = self._windows.get(key)
        if window is None:
            if len(self._windows) >= self._max_keys:
                self._forget_idle(now)
                if len(self._windows) >= self._max_keys:
                    return 0  # too many templates to follow: log the line, follow none of it
            self._windows[key] = _Window(now)
            return 0
        if now - window.opened >= self.interval:
            held = window.held
            window.opened, window.held, window.last = now, 0, ""
            return held
        window.held += 1
        window.last = line
        return None

    def due(self) -> list[tuple[K, int, str]]:
        """``(key, count, last line)`` of the lines held back in each window that is over.

        Each of those windows starts again now; windows over with nothing held back are forgotten.
        """
        now = self._clock()
        found = []
        for key, window in list(self._windows.items()):
            if now - window.opened < self.interval:
                continue
            if window.held:
                found.append((key, window.held, window.last))
                window.opened, window.held, window.last = now, 0, ""
            else:
                del self._windows[key]
        return found

    def flush(self) -> list[tuple[K, int, str]]:
        """``(key, count, last line)`` of every line held back, window over or not; forgets every window."""
        found = [(key, w.held, w.last) for key, w in self._windows.items() if w.held]
        self._windows.clear()
        return found

    def _forget_idle(self, now: float) -> None:
        for key, window in list(self._windows.items()):
            if not window.held and now - window.opened >= self.interval:
                del self._windows[key]


class SdkLogBridge:
    """Turns the client's log lines into records of ``logger``, repeats held back.

    :meth:`start` makes the pipe the client writes into (:attr:`path`) and the thread reading it;
    :meth:`feed` takes the bytes read (tests call it directly, with their own ``clock``).
    """

    def __init__(
        self,
        logger: logging.Logger = sdk_log,
        *,
        interval: float = REPEAT_INTERVAL,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.logger = logger
        self._limiter: RepeatLimiter[tuple[int, str, str]] = RepeatLimiter(interval, clock=clock)
        self._clock = clock
        self._tick = min(1.0, interval) if interval > 0 else 1.0
        self._partial = b""
        self._level = logging.WARNING  # of a line that is not the client's (a message's next line)
        self._pipe: tuple[int, int] | None = None  # (read, write) of the client's lines
        self._wake: tuple[int, int] | None = None  # (read, write): stop() wakes the thread
        self._thread: threading.Thread | None = None
        self._flushed = threading.Event()
        self._lock = threading.Lock()

    @property
    def path(self) -> str:
        """The file the client's file logger opens: the write end of the pipe."""
        if self._pipe is None:
            raise RuntimeError("the bridge is not started")
        return f"/dev/fd/{self._pipe[1]}"

    def start(self) -> bool:
        """Make the pipe and start the thread (idempotent); False where there is no ``/dev/fd``."""
        with self._lock:
            if self._pipe is not None:
                return True
            read, write = os.pipe()
            if not os.path.exists(f"/dev/fd/{write}"):
                os.close(read)
                os.close(write)
                return False
            with contextlib.suppress(AttributeError, OSError):  # Linux only; else the default size
                import fcntl

                fcntl.fcntl(write, fcntl.F_SETPIPE_SZ, PIPE_SIZE)
            # Both ends stay open for the life of the process: the client opens the write end anew
            # for each client made, and must never meet a pipe without a reader.
            self._pipe = (read, write)
            self._start_thread()
            atexit.register(self.stop)
            # A forked child inherits the client's logger (and so the pipe) but not the thread.
            os.register_at_fork(after_in_child=self._after_fork)
            return True

    def stop(self, timeout: float = EXIT_FLUSH) -> None:
        """Log what the pipe holds and every line held back (waiting at most ``timeout``); the thread
        then only empties the pipe. Registered to run at exit."""
        with self._lock:
            if self._wake is None or self._flushed.is_set():
                return
            os.write(self._wake[1], b"x")
        self._flushed.wait(timeout)

    def feed(self, data: bytes) -> None:
        """Log the complete lines of ``data``, keeping a partial last line for the next call."""
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self._handle(raw.decode("utf-8", "replace"))

    def report_due(self) -> None:
        """Log the lines held back in each window that is over, with their counts."""
        for (level, source, _), count, last in self._limiter.due():
            self._log(level, source, suppressed(last, count))

    def report_all(self) -> None:
        """Log every line held back, with its count."""
        for (level, source, _), count, last in self._limiter.flush():
            self._log(level, source, suppressed(last, count))

    def _handle(self, line: str) -> None:
        parsed = parse(line)
        if parsed is None:  # the next line of a message that has several
            level, source, message = self._level, "", line.rstrip()
            if not message:
                return
        else:
            level, source, message = parsed
            self._level = level
        if not self.logger.isEnabledFor(level):
            return
        held = self._limiter.admit((level, source, template(message)), message)
        if held is not None:
            self._log(level, source, suppressed(message, held))

    def _log(self, level: int, source: str, message: str) -> None:
        self.logger.log(level, "%s", message, extra={"pulsar_source": source})

    def _start_thread(self) -> None:
        assert self._pipe is not None
        self._wake = os.pipe()
        self._flushed = threading.Event()
        self._thread = threading.Thread(
            target=self._run, args=(self._pipe[0], self._wake[0]), name="pulsar-client-log", daemon=True
        )
        self._thread.start()

    def _after_fork(self) -> None:
        self._lock = threading.Lock()
        if self._pipe is not None:
            if self._wake is not None:
                for fd in self._wake:
                    with contextlib.suppress(OSError):
                        os.close(fd)
            self._start_thread()

    def _run(self, pipe: int, wake: int) -> None:
        try:
            self._pump(pipe, wake)
        finally:
            self._flushed.set()
            with contextlib.suppress(BaseException):
                while os.read(pipe, 65536):  # from now on discard: the client must never wait on the pipe
                    pass

    def _pump(self, pipe: int, wake: int) -> None:
        """Read and log until woken by :meth:`stop`, then log what the pipe holds and every line held back."""
        poller, pending = select.poll(), select.poll()  # poll, not select: the fds may be > 1023
        poller.register(pipe, select.POLLIN)
        poller.register(wake, select.POLLIN)
        pending.register(pipe, select.POLLIN)
        tick = round(self._tick * 1000)
        next_due = self._clock() + self._tick
        while True:
            ready = {fd for fd, _ in poller.poll(tick)}
            if wake in ready:  # stop(): what the pipe holds now, then every line held back
                for _ in range(PIPE_SIZE // 65536):
                    if not pending.poll(0):
                        break
                    self._logged(self.feed, os.read(pipe, 65536))
                self._logged(self.report_all)
                return
            if pipe in ready:  # a failing read ends the loop (the caller then only discards)
                self._logged(self.feed, os.read(pipe, 65536))
            if self._clock() >= next_due:
                next_due = self._clock() + self._tick
                self._logged(self.report_due)

    @staticmethod
    def _logged(log: Callable[..., None], *args: bytes) -> None:
        """Run ``log``: a failing handler or filter must not stop the reading (the client would wait)."""
        with contextlib.suppress(Exception):
            log(*args)


#: The bridge of this process (the client's logger is process-wide).
BRIDGE: Final = SdkLogBridge()
