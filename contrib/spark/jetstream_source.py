"""Reading JetStream for Spark: stream sequences are the offsets (partition ``0``).

The driver (:class:`JetStreamPlanner`) reads the stream's first and last sequence; an executor
(:func:`read_range`) replays one subject from ``start`` with the backend's ordered replay
consumer (``AckPolicy.NONE``, nothing left on the server) and stops at ``end``. A subject
filter makes sequences sparse, so a range also ends when the server holds no further message of
the subject below ``end``.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any

import nats.js.errors

from broker.backends.jetstream.backend import JetStreamBackend
from broker.contrib.spark import runtime
from broker.contrib.spark.arrow import records_batch
from broker.contrib.spark.offsets import Offsets, Range
from broker.contrib.spark.options import Options
from broker.errors import ConfigError, Timeout

__all__ = ["JetStreamPlanner", "read_range"]


def _backend(options: Options) -> JetStreamBackend:
    backend = options.connect()
    if not isinstance(backend, JetStreamBackend):
        raise ConfigError(f"expected a nats:// backend, got {type(backend).__name__}")
    return backend


async def _stream_bounds(backend: JetStreamBackend, subject: str) -> tuple[str, int, int]:
    stream = await backend.provisioner.stream_for(subject)
    jsm = backend.connection.jsm
    assert jsm is not None
    info = await jsm.stream_info(stream)
    return stream, max(info.state.first_seq, 1), info.state.last_seq + 1


class JetStreamPlanner:
    """First and next stream sequence of each subject's stream, for the driver."""

    def __init__(self, options: Options) -> None:
        self.options = options
        self.topics = options.topics()
        self._backend: JetStreamBackend | None = None

    @property
    def backend(self) -> JetStreamBackend:
        """The connection, opened on first use."""
        if self._backend is None:
            self._backend = _backend(self.options)
        return self._backend

    async def _bounds(self) -> tuple[Offsets, Offsets]:
        low: Offsets = {}
        high: Offsets = {}
        for subject in self.topics:
            _, first, nxt = await _stream_bounds(self.backend, subject)
            low[subject] = {"0": first}
            high[subject] = {"0": nxt}
        return low, high

    def bounds(self) -> tuple[Offsets, Offsets]:
        """``(earliest, latest)``: the first sequence and the one the next message gets."""
        return runtime.run(self._bounds())

    def close(self) -> None:
        """Close the connection."""
        if self._backend is not None:
            backend, self._backend = self._backend, None
            runtime.run(backend.close())


async def _more_below(backend: JetStreamBackend, stream: str, subject: str, position: int, end: int) -> bool:
    """True when the stream holds a message of ``subject`` with a sequence in ``[position, end)``."""
    jsm = backend.connection.jsm
    assert jsm is not None
    try:
        found = await jsm.get_msg(stream, seq=position, subject=subject, next=True)
    except nats.js.errors.NotFoundError:
        return False
    seq = found.seq or 0
    return position <= seq < end


def read_range(options: Options, part: Range) -> Iterator[Any]:
    """Arrow record batches of the messages of ``part.topic`` with sequences in ``[start, end)``."""
    chunk = options.get_int("fetchRecords", 1000)
    timeout = options.get_float("readTimeout", 120.0)
    backend = _backend(options)
    try:
        stream, _, _ = runtime.run(_stream_bounds(backend, part.topic))
        replay = backend.replay(part.topic, start_sequence=part.start, batch_size=chunk)
        position = part.start
        deadline = time.monotonic() + timeout
        while position < part.end:
            records = runtime.run(replay.next_batch(timeout=0.25))
            if records:
                inside = [r for r in records if r.offset < part.end]
                if inside:
                    position = inside[-1].offset + 1
                    deadline = time.monotonic() + timeout
                    yield records_batch(inside)
                if len(inside) < len(records):
                    break
                continue
            if not runtime.run(_more_below(backend, stream, part.topic, position, part.end)):
                break
            if time.monotonic() > deadline:
                raise Timeout(
                    f"{part.topic}: no message for {timeout}s at sequence {position} (range ends at "
                    f"{part.end}); raise option readTimeout if the server is slow"
                )
    finally:
        runtime.run(backend.close())
