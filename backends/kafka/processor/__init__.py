"""Stateful stream processing on the ``broker.log`` port: goka's model in asyncio.

A *group graph* (:func:`define_group` with :func:`input`, :func:`inputs`, :func:`loop`,
:func:`output`, :func:`join`, :func:`lookup`, :func:`persist`) declares what a consumer group
reads, keeps and writes. A :class:`Processor` runs its callbacks over co-partitioned inputs,
each with a :class:`Context` to read and change the group table (kept locally in a
:class:`Storage` and in the compacted ``<group>-table`` topic), join, look up, emit and loop
back. A :class:`View` serves a whole table; an :class:`Emitter` feeds streams; the
:class:`Tester` runs callbacks in unit tests with no broker.

    graph = define_group(
        "counter",
        input("clicks", "str", lambda ctx, msg: ctx.set_value((ctx.value() or 0) + 1)),
        persist("int64"),
    )
    await Processor(log, graph).run()

Everything here depends on :mod:`broker.log` only: it runs on Kafka
(``broker.connect("kafka://...").log()``) and on the in-memory log
(``broker.connect("inmem://name").log()``).
"""

from broker.backends.kafka.processor.codecs import Int64Codec
from broker.backends.kafka.processor.context import Context
from broker.backends.kafka.processor.defaults import (
    data_dir,
    default_processor_storage_path,
    default_view_storage_path,
    set_data_dir,
)
from broker.backends.kafka.processor.emitter import Emitter
from broker.backends.kafka.processor.errors import (
    CallbackFailed,
    ContextError,
    EmitterClosed,
    GraphError,
    NotCopartitioned,
    NotOwned,
    PartitionerMismatch,
    ProcessorError,
    StorageLocked,
    TableNotReady,
    VisitAborted,
)
from broker.backends.kafka.processor.graph import (
    Callback,
    Edge,
    EdgeKind,
    Group,
    GroupGraph,
    Stream,
    Table,
    define_group,
    group_table,
    input,
    inputs,
    join,
    lookup,
    loop,
    loop_stream,
    output,
    persist,
    reset_suffixes,
    set_loop_suffix,
    set_table_suffix,
    visitor,
)
from broker.backends.kafka.processor.lmdb_storage import LmdbStorage, lmdb_storage
from broker.backends.kafka.processor.processor import Processor
from broker.backends.kafka.processor.settings import (
    Assignment,
    NilHandling,
    ProcessorOptions,
    ProcessorState,
    RebalanceCallback,
    RestartBackoff,
    RetryDelay,
    SimpleBackoff,
)
from broker.backends.kafka.processor.stats import (
    InputStats,
    OutputStats,
    PartitionStats,
    ProcessorStats,
    TableStats,
    ViewStats,
)
from broker.backends.kafka.processor.storage import (
    MemoryStorage,
    NullStorage,
    Storage,
    StorageBuilder,
    memory_storage,
    null_storage,
)
from broker.backends.kafka.processor.table import RecoveryStats, TableStatus, UpdateCallback, default_update
from broker.backends.kafka.processor.tester import Clock, Tester, Timestamp, Tracker
from broker.backends.kafka.processor.topics import (
    LogTopicManager,
    TopicManager,
    TopicManagerBuilder,
    TopicManagerConfig,
)
from broker.backends.kafka.processor.view import StateChanges, View, ViewIterator, ViewState
from broker.driver.partitioning import Partitioner, partitioner_by_name

__all__ = [
    "Assignment",
    "Callback",
    "CallbackFailed",
    "Clock",
    "Context",
    "ContextError",
    "Edge",
    "EdgeKind",
    "Emitter",
    "EmitterClosed",
    "GraphError",
    "Group",
    "GroupGraph",
    "InputStats",
    "Int64Codec",
    "LmdbStorage",
    "LogTopicManager",
    "MemoryStorage",
    "NilHandling",
    "NotCopartitioned",
    "NotOwned",
    "NullStorage",
    "OutputStats",
    "PartitionStats",
    "Partitioner",
    "PartitionerMismatch",
    "Processor",
    "ProcessorError",
    "ProcessorOptions",
    "ProcessorState",
    "ProcessorStats",
    "RebalanceCallback",
    "RecoveryStats",
    "RestartBackoff",
    "RetryDelay",
    "SimpleBackoff",
    "StateChanges",
    "Storage",
    "StorageBuilder",
    "StorageLocked",
    "Stream",
    "Table",
    "TableNotReady",
    "TableStats",
    "TableStatus",
    "Tester",
    "Timestamp",
    "TopicManager",
    "TopicManagerBuilder",
    "TopicManagerConfig",
    "Tracker",
    "UpdateCallback",
    "View",
    "ViewIterator",
    "ViewState",
    "ViewStats",
    "VisitAborted",
    "data_dir",
    "default_processor_storage_path",
    "default_update",
    "default_view_storage_path",
    "define_group",
    "group_table",
    "input",
    "inputs",
    "join",
    "lmdb_storage",
    "lookup",
    "loop",
    "loop_stream",
    "memory_storage",
    "null_storage",
    "output",
    "partitioner_by_name",
    "persist",
    "reset_suffixes",
    "set_data_dir",
    "set_loop_suffix",
    "set_table_suffix",
    "visitor",
]
