"""The processor's errors, all inside :mod:`broker.errors`' hierarchy.

* :class:`GraphError` (a ``ConfigError``): a group graph breaks one of the graph rules.
* :class:`ProcessorError`: the processor stopped; ``__cause__`` holds what went wrong.
* :class:`ContextError`: a callback misused its context (undeclared topic, no persist edge, ...);
  the processor stops with it even when the callback catches it.
* :class:`CallbackFailed`: a callback called ``ctx.fail(err)`` or raised.
* :class:`NotCopartitioned`: inputs with unequal partition counts, or an assignment that does
  not give one instance the same partition numbers of every input topic.
* :class:`NotOwned`: ``Processor.get`` for a key whose partition this instance does not own.
* :class:`PartitionerMismatch` (a ``ConfigError``): a recovered table's keys are not where the
  configured partitioner puts them (a goka table read with murmur2, for example).
"""

from __future__ import annotations

from broker.errors import BrokerError, ClosedError, ConfigError

__all__ = [
    "CallbackFailed",
    "ContextError",
    "EmitterClosed",
    "GraphError",
    "NotCopartitioned",
    "NotOwned",
    "PartitionerMismatch",
    "ProcessorError",
    "StorageLocked",
    "TableNotReady",
    "VisitAborted",
]


class GraphError(ConfigError):
    """A group graph is invalid (the message names the rule and the edge)."""


class ProcessorError(BrokerError):
    """The processor stopped because of an error (chained as ``__cause__``)."""


class ContextError(ProcessorError):
    """A callback used its context in a way the group graph does not allow."""


class CallbackFailed(ProcessorError):
    """A callback failed (``ctx.fail(err)`` or an exception); the processor stops."""


class NotCopartitioned(ProcessorError):
    """Input topics are not co-partitioned, or an assignment split a partition number."""


class StorageLocked(ProcessorError, ConfigError):
    """A local store directory is in use by another process (or another store of this one).

    Two processes of one group on one host must not share a table partition's store: give each
    its own storage directory (``storage=lmdb_storage(...)`` or ``POLYBROKER_DATA_DIR``).
    """


class NotOwned(BrokerError, LookupError):
    """The key's partition is not owned by this processor instance."""


class PartitionerMismatch(ConfigError):
    """A table's keys are not in the partitions the configured partitioner gives them.

    Lookups would miss (silently) and emits would land where that table's other writers do not
    look. The message names the partitioner the keys fit, where one of the known ones does.
    """


class VisitAborted(ProcessorError):
    """``visit_all`` stopped before visiting every key: the processor stopped, or a partition was revoked."""


class TableNotReady(BrokerError):
    """A table (view) was read before its local storage was opened."""


class EmitterClosed(ClosedError):
    """``emit`` after ``Emitter.finish()``."""
