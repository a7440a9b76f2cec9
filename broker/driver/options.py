"""The portable consumer options: one declared list, read by backends, docs and the conformance suite.

A portable option means the same on every backend. A backend that has the option's capability
accepts it under this name and maps it to its native setting; a backend without the capability
raises :class:`~broker.errors.NotSupported` naming the capability; a value the broker cannot
honour (below a server floor, above a ceiling) raises :class:`~broker.errors.ConfigError` saying
so. No backend answers a portable name with :class:`~broker.errors.UnknownSetting`.
"""

from __future__ import annotations

import operator
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from broker.backoff import Backoff
from broker.driver.settings import build_settings, field_values
from broker.errors import ConfigError
from broker.retry import RetryPolicy

__all__ = [
    "PORTABLE_OPTIONS",
    "PortableOption",
    "build_consumer_options",
    "check_batching",
    "check_count",
    "check_receiver_options",
    "check_seconds",
    "portable_option",
    "rename_portable",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PortableOption:
    """One option of ``Backend.messages()`` / ``receiver()`` that every backend understands."""

    #: The keyword name.
    name: str
    #: What the value is (``seconds``, ``count``, ``topic name``).
    unit: str
    #: The capability flag a backend needs to honour it (None: every backend).
    capability: str | None
    #: What it means, in one sentence.
    meaning: str
    #: The native setting behind it, per backend (for the docs).
    native: tuple[tuple[str, str], ...] = ()


PORTABLE_OPTIONS: tuple[PortableOption, ...] = (
    PortableOption(
        "ack_deadline",
        "seconds",
        "ack_deadline",
        "an unsettled message is redelivered about this long after it was handed out",
        (
            ("inmem", "lease deadline"),
            ("kafka", "marker queue redelivery timeout"),
            ("nats", "consumer ack_wait"),
            ("pubsub", "subscription ack deadline (10-600 s)"),
            ("pulsar", "consumer ack timeout (at least 10 s)"),
            ("servicebus", "entity lock duration (5 s - 5 min), set when the backend creates it"),
        ),
    ),
    PortableOption(
        "max_attempts",
        "count",
        "dead_letter",
        "after this many deliveries a message is dead-lettered instead of redelivered",
        (
            ("inmem", "max_attempts"),
            ("kafka", "marker queue max deliveries"),
            ("nats", "consumer max_deliver"),
            ("pubsub", "dead-letter policy max_delivery_attempts (5-100)"),
            ("pulsar", "dead-letter policy max redeliver count"),
            ("servicebus", "entity MaxDeliveryCount"),
        ),
    ),
    PortableOption(
        "dead_letter_topic",
        "topic name",
        "dead_letter",
        "where dead-lettered messages are published",
        (
            ("inmem", "dead_letter_topic"),
            ("kafka", "dead-letter topic"),
            ("nats", "dead-letter subject"),
            ("pubsub", "dead-letter policy topic"),
            ("pulsar", "dead-letter policy topic"),
            ("servicebus", "ForwardDeadLetteredMessagesTo"),
        ),
    ),
)


def portable_option(name: str) -> PortableOption:
    """The declared portable option called ``name`` (``KeyError`` if there is none)."""
    for option in PORTABLE_OPTIONS:
        if option.name == name:
            return option
    raise KeyError(name)


def rename_portable(options: Mapping[str, Any], native_names: Mapping[str, str]) -> dict[str, Any]:
    """``options`` with each portable name replaced by the backend's native one (``-`` read as ``_``).

    Raises :class:`~broker.errors.ConfigError` when both the portable and the native name are given.
    """
    out = {key.replace("-", "_"): value for key, value in options.items()}
    for portable, native in native_names.items():
        if portable in out:
            if native in out:
                raise ConfigError(f"give {native} or {portable}, not both")
            out[native] = out.pop(portable)
    return out


def build_consumer_options(
    cls: type[T],
    settings: Any,
    overrides: Mapping[str, Any],
    *,
    native_names: Mapping[str, str],
    backend: str,
) -> T:
    """The options of one consumer: the dataclass ``cls`` filled from ``settings`` and ``overrides``.

    ``settings`` carries the defaults under ``cls``'s field names; ``overrides`` may use the portable
    names (:func:`rename_portable` with ``native_names``) and strings, coerced as
    :func:`~broker.driver.settings.build_settings` does. Unknown names raise
    :class:`~broker.errors.UnknownSetting`, bad values :class:`~broker.errors.ConfigError`.
    """
    values = field_values(cls, settings)
    values.update(rename_portable(overrides, native_names))
    return build_settings(cls, values, backend=backend)


# -- the factory arguments every backend checks the same way, before it opens anything ----------


def check_count(name: str, value: object, minimum: int = 1) -> None:
    """Raise :class:`~broker.errors.ConfigError` unless ``value`` is an integer >= ``minimum``.

    An integer is anything :func:`operator.index` takes (``int``, a NumPy integer, any type with
    ``__index__``) except a ``bool``; ``True``, ``2.5`` and ``"3"`` are refused: a count given as
    anything else is a mistake the caller should see now, not a surprise when the consumer runs.
    """
    try:
        count = None if isinstance(value, bool) else operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        count = None
    if count is None or count < minimum:
        raise ConfigError(f"{name} must be an integer >= {minimum}, got {value!r}")


def check_seconds(name: str, value: object, *, optional: bool = False) -> None:
    """Raise :class:`~broker.errors.ConfigError` unless ``value`` is a number of seconds >= 0
    (or None, when ``optional``): NaN, negative numbers, booleans and strings are refused."""
    if value is None and optional:
        return
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        what = "a number of seconds >= 0" + (" or None" if optional else "")
        raise ConfigError(f"{name} must be {what}, got {value!r}")


def check_batching(batch_size: object, batch_timeout: object, *, minimum_size: int = 0) -> None:
    """Check a batched consumer's ``batch_size`` (0: the backend's default, where ``minimum_size``
    is 0) and ``batch_timeout`` (seconds)."""
    check_count("batch_size", batch_size, minimum_size)
    check_seconds("batch_timeout", batch_timeout)


def check_receiver_options(
    *,
    concurrency: object,
    nack_delay: object,
    drain_timeout: object,
    retry: object,
    default_concurrency: bool = False,
) -> None:
    """Check the arguments of ``receiver()`` (and ``batched_receiver()``) where they are given.

    ``concurrency`` is an integer >= 1 (or None where ``default_concurrency``: the backend's
    setting); ``nack_delay`` a :class:`~broker.backoff.Backoff`, seconds >= 0 or None;
    ``drain_timeout`` seconds >= 0 or None (wait for running handlers without limit); ``retry``
    a :class:`~broker.retry.RetryPolicy` or None. Every backend calls this first, so a bad value
    raises :class:`~broker.errors.ConfigError` from the call, never later from ``receive()``.
    """
    if not (concurrency is None and default_concurrency):
        check_count("concurrency", concurrency)
    if not isinstance(nack_delay, Backoff):
        check_seconds("nack_delay", nack_delay, optional=True)
    check_seconds("drain_timeout", drain_timeout, optional=True)
    if retry is not None and not isinstance(retry, RetryPolicy):
        raise ConfigError(f"retry must be a broker.RetryPolicy, got {retry!r}")
