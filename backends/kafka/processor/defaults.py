"""Default local storage: on disk under a per-user data directory (goka's default storage paths).

goka keeps processor tables under ``DefaultProcessorStoragePath(group)`` and views under
``DefaultViewStoragePath()``, so a restart reads only what is new in a table topic. Here, on a
persistent log (Kafka), a :class:`~broker.backends.kafka.processor.processor.Processor` and a
:class:`~broker.backends.kafka.processor.view.View` given no ``storage`` keep their tables in LMDB:

* processors: ``<data dir>/processor/<group>/<table topic>.<partition>`` (their lookup views:
  ``view-<table topic>.<partition>`` in the same directory);
* views: ``<data dir>/view/<table topic>.<partition>``.

The data directory is, in order: the ``POLYBROKER_DATA_DIR`` environment variable, the one set with
:func:`set_data_dir`, ``$XDG_DATA_HOME/polybroker``, ``%LOCALAPPDATA%\\polybroker`` on Windows,
``~/Library/Application Support/polybroker`` on macOS, else ``~/.local/share/polybroker``.

On the in-memory log (which dies with the process) the default stays :func:`memory_storage`, and
``storage=memory_storage()`` picks memory explicitly anywhere.

Each partition's store is locked for one process (see
:mod:`~broker.backends.kafka.processor.lmdb_storage`): a processor that finds a group-table
partition locked stops with :class:`~broker.backends.kafka.processor.errors.StorageLocked`; a view
(every instance holds every partition, so two processes on one host would always meet) falls
back to keeping that partition in memory, with a warning.
"""

from __future__ import annotations

import logging
import os
import sys
from pathlib import Path
from typing import Any

from broker.backends.kafka.processor.assignment import kafka_log_of
from broker.backends.kafka.processor.errors import StorageLocked
from broker.backends.kafka.processor.storage import MemoryStorage, Storage, StorageBuilder, memory_storage

__all__ = [
    "DATA_DIR_ENV",
    "data_dir",
    "default_processor_storage",
    "default_processor_storage_path",
    "default_view_storage",
    "default_view_storage_path",
    "memory_when_locked",
    "persistent_log",
    "resolve_processor_storage",
    "resolve_view_storage",
    "set_data_dir",
]

log = logging.getLogger("broker.backends.kafka.processor")

#: The environment variable that names the data directory (wins over everything else).
DATA_DIR_ENV = "POLYBROKER_DATA_DIR"

_configured: Path | None = None


def set_data_dir(path: str | os.PathLike[str] | None) -> None:
    """Set the process-wide data directory (``None``: back to the platform default).

    ``POLYBROKER_DATA_DIR`` still wins, so a deployment can move it without a code change.
    """
    global _configured
    _configured = None if path is None else Path(path)


def data_dir() -> Path:
    """The directory default stores live under (see the module doc for the order)."""
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        return Path(env)
    if _configured is not None:
        return _configured
    xdg = os.environ.get("XDG_DATA_HOME")
    if xdg:
        return Path(xdg) / "polybroker"
    if sys.platform == "win32":  # pragma: no cover - platform
        local = os.environ.get("LOCALAPPDATA")
        if local:
            return Path(local) / "polybroker"
    if sys.platform == "darwin":  # pragma: no cover - platform
        return Path.home() / "Library" / "Application Support" / "polybroker"
    return Path.home() / ".local" / "share" / "polybroker"


def _safe(name: str) -> str:
    """``name`` usable as one directory name (Kafka names are ``[a-zA-Z0-9._-]``; anything else escaped)."""
    cleaned = "".join(c if c.isalnum() or c in "._-" else f"%{ord(c):02x}" for c in name)
    return cleaned if cleaned not in ("", ".", "..") else f"%{cleaned}"


def default_processor_storage_path(group: str) -> Path:
    """Where a processor of ``group`` keeps its tables by default (goka's ``DefaultProcessorStoragePath``)."""
    return data_dir() / "processor" / _safe(group)


def default_view_storage_path() -> Path:
    """Where views keep their tables by default (goka's ``DefaultViewStoragePath``)."""
    return data_dir() / "view"


def _lmdb_builder(root: Path) -> StorageBuilder:
    from broker.backends.kafka.processor.lmdb_storage import LmdbStorage

    def build(name: str, partition: int) -> Storage:
        return LmdbStorage(root / f"{_safe(name)}.{partition}")

    return build


def memory_when_locked(
    build: StorageBuilder, owner: str, logger: logging.Logger | None = None
) -> StorageBuilder:
    """``build``, but a store locked by another process is replaced by a memory store (warned).

    For views: each holds every partition of its table, so two on one host always meet.
    """
    warn = logger or log

    def open_store(name: str, partition: int) -> Storage:
        try:
            return build(name, partition)
        except StorageLocked as exc:
            warn.warning("%s: %s; keeping %s[%d] in memory instead", owner, exc, name, partition)
            return MemoryStorage()

    return open_store


def default_processor_storage(group: str) -> StorageBuilder:
    """LMDB stores under :func:`default_processor_storage_path` (locked per partition)."""
    return _lmdb_builder(default_processor_storage_path(group))


def default_view_storage() -> StorageBuilder:
    """LMDB stores under :func:`default_view_storage_path`; memory where another process holds one."""
    return memory_when_locked(_lmdb_builder(default_view_storage_path()), "view")


def persistent_log(log_port: Any) -> bool:
    """True for a log whose topics outlive the process (Kafka), where on-disk tables pay off."""
    return kafka_log_of(log_port) is not None


def resolve_processor_storage(storage: StorageBuilder | None, log_port: Any, group: str) -> StorageBuilder:
    """``storage``, or the default for ``group`` on ``log_port`` (disk on Kafka, memory elsewhere)."""
    if storage is not None:
        return storage
    if persistent_log(log_port):
        return default_processor_storage(group)
    return memory_storage()


def resolve_view_storage(storage: StorageBuilder | None, log_port: Any) -> StorageBuilder:
    """``storage``, or the view default on ``log_port`` (disk on Kafka, memory elsewhere)."""
    if storage is not None:
        return storage
    if persistent_log(log_port):
        return default_view_storage()
    return memory_storage()
