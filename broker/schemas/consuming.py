"""Consumers of registry-framed values that never make the event loop wait on the registry.

They are the :mod:`broker.typed` consumers (the same typed messages and records, the same
settlement and decode-error handling) with one step, their ``prepare``: before handing out what
they fetched, the writer schemas not seen yet are looked up in a worker thread
(:meth:`SchemaBinding.resolve`), for the key binding too where there is one (Kafka). ``decoded``
is then pure CPU. A schema that cannot be had fails the decoding of its messages only:
:class:`~broker.errors.DecodeError` for an unknown id (a receiver dead-letters the message), the
registry's retryable error when it cannot be reached.
"""

from __future__ import annotations

from typing import Any

from broker.schemas.binding import SchemaBinding
from broker.typed.consuming import Prepare

__all__ = ["resolver"]


def resolver(binding: SchemaBinding[Any], key: SchemaBinding[Any] | None = None) -> Prepare:
    """The ``prepare`` step looking up the writer schemas of fetched items (and of their keys)."""
    if key is None:
        return binding.resolve

    async def resolve(items: list[Any]) -> None:
        await binding.resolve(items)
        await key.resolve(items, keys=True)

    return resolve
