"""Processor options, nil handling modes and processor states."""

from __future__ import annotations

import enum
import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from broker import Backoff
from broker.backends.kafka.processor.storage import StorageBuilder
from broker.backends.kafka.processor.table import UpdateCallback, default_update
from broker.backends.kafka.processor.topics import TopicManager, TopicManagerBuilder, TopicManagerConfig
from broker.driver.partitioning import Partitioner, partitioner_by_name
from broker.errors import ConfigError, UnknownSetting
from broker.log import StartPosition

if TYPE_CHECKING:
    from broker.backends.kafka.processor.graph import GroupGraph

__all__ = [
    "Assignment",
    "NilHandling",
    "ProcessorOptions",
    "ProcessorState",
    "RebalanceCallback",
    "RestartBackoff",
    "RetryDelay",
    "SimpleBackoff",
    "resolve_partitioner",
]


class NilHandling(enum.Enum):
    """What happens to input messages whose value is ``None`` (tombstones)."""

    #: Drop them (committed, the callback is not called). goka's default.
    IGNORE = "ignore"
    #: Call the callback with ``None`` (the codec is not asked).
    PROCESS = "process"
    #: Pass them through the codec as empty bytes (``codec.decode(b"")``) and call the callback.
    DECODE = "decode"


class ProcessorState(enum.Enum):
    """The life of a processor."""

    IDLE = "idle"
    STARTING = "starting"
    SETUP = "setup"
    RUNNING = "running"
    STOPPING = "stopping"
    STOPPED = "stopped"
    FAILED = "failed"


@dataclass(frozen=True, slots=True)
class Assignment:
    """What a rebalance gave this instance: the partition numbers it owns now, and what changed.

    ``offsets`` is goka's ``Assignment`` (partition -> offset): for every partition owned, the
    group's committed offset in its first input topic, where processing resumes (-1: nothing
    committed yet, processing starts at ``start``). It is left out of ``==`` (and the hash).
    """

    partitions: frozenset[int]
    added: frozenset[int]
    revoked: frozenset[int]
    offsets: Mapping[int, int] = field(default_factory=dict, compare=False)


#: Called after every rebalance with the new :class:`Assignment` (plain or coroutine function).
RebalanceCallback = Callable[[Assignment], Awaitable[None] | None]


@runtime_checkable
class RetryDelay(Protocol):
    """A backoff policy (goka's ``BackoffBuilder``): the wait before restart number ``attempt``.

    :class:`broker.backoff.Backoff` is one; any object with this method will do.
    """

    def delay(self, attempt: int) -> float:
        """Seconds to wait before the ``attempt``-th restart in a row (1 for the first)."""
        ...


class SimpleBackoff:
    """goka's ``NewSimpleBackoff``: each wait ``step`` seconds longer than the last, up to ``maximum``.

    ``delay(attempt)`` is ``min(step * attempt, maximum)``: 10, 20, 30, ... seconds with goka's
    default builder (``SimpleBackoff(10, 120)``). A :class:`RetryDelay` for ``backoff=``.
    """

    __slots__ = ("maximum", "step")

    def __init__(self, step: float, maximum: float) -> None:
        if not step > 0 or not maximum >= step:
            raise ConfigError(f"SimpleBackoff needs step > 0 and maximum >= step, got {step} and {maximum}")
        self.step = step
        self.maximum = maximum

    def __repr__(self) -> str:
        return f"SimpleBackoff(step={self.step}, maximum={self.maximum})"

    def delay(self, attempt: int) -> float:
        """Seconds to wait before the ``attempt``-th restart in a row (1 for the first)."""
        return float(min(self.step * max(attempt, 1), self.maximum))


class RestartBackoff:
    """Counts restarts in a row and gives the wait before the next one.

    A run that lasted ``reset_after`` seconds or longer before it failed starts the count
    afresh (goka's ``WithBackoffResetTimeout``), so one failure after a long healthy run waits
    the shortest delay again.
    """

    __slots__ = ("attempt", "policy", "reset_after")

    def __init__(self, policy: RetryDelay, reset_after: float) -> None:
        self.policy = policy
        self.reset_after = reset_after
        #: Restarts in a row so far.
        self.attempt = 0

    def next_delay(self, ran_for: float) -> float:
        """The wait before restarting a run that failed after ``ran_for`` seconds."""
        if ran_for >= self.reset_after:
            self.attempt = 0
        self.attempt += 1
        return max(0.0, float(self.policy.delay(self.attempt)))


def resolve_partitioner(partitioner: str | Partitioner) -> Partitioner:
    """``"murmur2"`` (default), ``"fnv1a"`` (goka) or a ``(key bytes, count) -> partition`` function."""
    if isinstance(partitioner, str):
        return partitioner_by_name(partitioner)
    if not callable(partitioner):
        raise ConfigError(f"partitioner must be 'murmur2', 'fnv1a' or a function, got {partitioner!r}")
    return partitioner


@dataclass(frozen=True, slots=True)
class ProcessorOptions:
    """How a :class:`~broker.backends.kafka.processor.processor.Processor` runs.

    Departure from goka: a group with no committed offset starts at the *earliest* input offset
    (``start="earliest"``), so a new group never silently skips messages already in its inputs.
    """

    #: Local storage of the group table, joins and lookup views. ``None`` (default): on Kafka, LMDB
    #: stores under ``<data dir>/processor/<group>`` (goka's ``DefaultProcessorStoragePath``; see
    #: :mod:`~broker.backends.kafka.processor.defaults`), so a restart reads only what is new;
    #: on the in-memory log, memory. ``memory_storage()`` keeps tables in memory anywhere.
    storage: StorageBuilder | None = None
    #: Key partitioner for emits, loopbacks and lookups: ``murmur2`` (Kafka's), ``fnv1a`` (goka's).
    partitioner: str | Partitioner = "murmur2"
    #: What to do with ``None`` input values.
    nil_handling: NilHandling = NilHandling.IGNORE
    #: How table records reach the store during recovery and catch-up.
    update_callback: UpdateCallback = default_update
    #: Called after each rebalance.
    rebalance_callback: RebalanceCallback | None = None
    #: Where a group with no committed offset starts reading its inputs.
    start: StartPosition = "earliest"
    #: Most input records processed per batch (one commit per batch).
    batch_size: int = 2000
    #: Longest wait for input before committing deferred work and checking for stop (seconds).
    poll_timeout: float = 0.1
    #: Commit (a checkpoint) at least this often while input flows (seconds); always when idle.
    commit_interval: float = 1.0
    #: ... and after this many input messages since the last checkpoint.
    commit_every: int = 50_000
    #: Headers added to every emit and loopback (per-call headers win).
    headers: Mapping[str, str] = field(default_factory=dict)
    #: Partition count for missing input and join topics (``None``: missing inputs are an error).
    create_partitions: int | None = None
    #: Topic config for created table topics (unless ``topic_config`` is given).
    table_config: Mapping[str, str] = field(default_factory=lambda: {"cleanup.policy": "compact"})
    #: How created topics are configured (goka's ``TopicManagerConfig``): per-table and per-stream
    #: replication, stream retention, table and stream settings. None: ``table_config`` and the
    #: broker's defaults.
    topic_config: TopicManagerConfig | None = None
    #: Creates the processor's topics (goka's ``WithTopicManagerBuilder``): a ``TopicManager``, or a
    #: function ``log -> TopicManager``. None: a ``LogTopicManager`` with ``topic_config``.
    topic_manager: TopicManager | TopicManagerBuilder | None = None
    #: How long ``stop()`` waits for deferred commits of revoked partitions (seconds).
    defer_timeout: float = 30.0
    #: Keep the group table and joined tables of the partitions this member does not own up to
    #: date as well (goka's ``WithHotStandby``): when a rebalance or a failover hands it one,
    #: recovery reads only what the standby had not read yet instead of the whole table.
    #: Costs reading (and storing) every table partition on every member.
    hot_standby: bool = False
    #: Recover every table partition (the group table and joined tables) *before* joining the
    #: consumer group (goka's ``WithRecoverAhead``), then keep them up to date as with
    #: ``hot_standby`` (which it implies): joining and rebalancing do not wait for a full
    #: recovery, an assignment reads only what arrived since. Costs reading (and storing) every
    #: table partition on every member, and a start-up that waits for all of them.
    recover_ahead: bool = False
    #: Called with the group graph when the processor is made (goka's ``WithGroupGraphHook``).
    graph_hook: Callable[[GroupGraph], None] | None = None
    #: Partitions whose records async callbacks handle at once (records of one partition stay in
    #: order, one at a time; goka runs a goroutine per partition). 1: one record at a time.
    partition_concurrency: int = 16
    #: The ``client.id`` its consumers, readers and producers report to the broker
    #: (goka's ``WithClientID``; ``None``: the log's own). Ignored by the in-memory log.
    client_id: str | None = None
    #: Restart after a broker failure (the log unreachable, a send or poll failing) instead of
    #: stopping: tear down, wait per ``backoff``, set up again and recover from the committed
    #: offsets. Callback failures, graph and co-partitioning errors still stop the processor.
    auto_reconnect: bool = False
    #: The waits between restarts in a row (goka's ``WithBackoffBuilder``): a
    #: :class:`broker.backoff.Backoff` or any :class:`RetryDelay`.
    backoff: RetryDelay = field(default_factory=lambda: Backoff(initial=0.5, multiplier=2.0, maximum=30.0))
    #: A run that lasted this long (seconds) before failing restarts the backoff from its first
    #: delay (goka's ``WithBackoffResetTimeout``; 60 s as in goka).
    backoff_reset: float = 60.0
    #: An OpenTelemetry ``TracerProvider`` (opt-in tracing; needs the ``otel`` extra): each
    #: callback runs in a ``process <topic>`` span continuing the trace in the input's headers,
    #: and its emits and loopbacks carry that span's context (``traceparent``) in their headers.
    #: ``None`` (default): no spans, no propagation, nothing imported. To use the global provider,
    #: pass ``opentelemetry.trace.get_tracer_provider()``.
    tracer_provider: Any = None
    #: The ``TextMapPropagator`` that reads and writes the trace context headers, with
    #: ``tracer_provider`` (default: OpenTelemetry's global one, W3C trace context and baggage).
    propagator: Any = None
    #: Where the processor, its lookup views and its table recovery log (goka's ``WithLogger``;
    #: ``None``: the module logger ``broker.backends.kafka.processor``).
    logger: logging.Logger | None = None

    def __post_init__(self) -> None:
        if self.batch_size < 1:
            raise ConfigError(f"batch_size must be >= 1, got {self.batch_size}")
        if self.commit_interval < 0 or self.commit_every < 1:
            raise ConfigError(
                "commit_interval must be >= 0 and commit_every >= 1, "
                f"got {self.commit_interval} and {self.commit_every}"
            )
        if self.partition_concurrency < 1:
            raise ConfigError(f"partition_concurrency must be >= 1, got {self.partition_concurrency}")
        if self.poll_timeout <= 0:
            raise ConfigError(f"poll_timeout must be > 0, got {self.poll_timeout}")
        if self.create_partitions is not None and self.create_partitions < 1:
            raise ConfigError(f"create_partitions must be >= 1, got {self.create_partitions}")
        if self.start not in ("earliest", "latest"):
            raise ConfigError(f"start must be 'earliest' or 'latest', got {self.start!r}")
        if not isinstance(self.nil_handling, NilHandling):
            raise ConfigError(f"nil_handling must be a NilHandling, got {self.nil_handling!r}")
        resolve_partitioner(self.partitioner)
        if self.client_id is not None and (not isinstance(self.client_id, str) or not self.client_id):
            raise ConfigError(f"client_id must be a non-empty string or None, got {self.client_id!r}")
        if not isinstance(self.backoff, RetryDelay):
            raise ConfigError(f"backoff must have a delay(attempt) method (a Backoff), got {self.backoff!r}")
        if self.logger is not None and not isinstance(self.logger, logging.Logger):
            raise ConfigError(f"logger must be a logging.Logger or None, got {self.logger!r}")
        if self.backoff_reset < 0:
            raise ConfigError(f"backoff_reset must be >= 0, got {self.backoff_reset}")

    @classmethod
    def build(cls, options: ProcessorOptions | None, overrides: Mapping[str, Any]) -> ProcessorOptions:
        """``options`` (or the defaults) with ``overrides`` applied; unknown names are errors."""
        valid = [f.name for f in fields(cls)]
        unknown = [k for k in overrides if k not in valid]
        if unknown:
            raise UnknownSetting("processor", unknown, valid)
        base = options or cls()
        if not overrides:
            return base
        values = {f.name: getattr(base, f.name) for f in fields(cls)}
        values.update(overrides)
        return cls(**values)
