"""Grouping records of a batch."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import TypeVar

from broker.message import Message, Record

__all__ = ["group_by", "group_by_key"]

T = TypeVar("T", Message, Record)


def group_by(items: Iterable[T], key: Callable[[T], str]) -> dict[str, list[T]]:
    """Group ``items`` by ``key(item)``, keeping their order within each group."""
    groups: dict[str, list[T]] = {}
    for item in items:
        groups.setdefault(key(item), []).append(item)
    return groups


def group_by_key(items: Iterable[T]) -> dict[str, list[T]]:
    """Group by the message/record key (a missing key groups under ``""``)."""
    return group_by(items, lambda item: item.key or "")
