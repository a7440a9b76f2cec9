"""Consumer and publisher options are validated where they are given, not later inside ``receive()``.

A bad number or choice raises :class:`~broker.errors.ConfigError` (naming the option and the value)
from the call that takes it: ``receiver(concurrency=0)`` fails at once, not when the receiver runs.
The table covers every numeric and enumerated option of every consumer and publisher factory on
``inmem://``; a second test shows every backend's own consumer factories call the core's checks (one
implementation, in :mod:`broker.driver.options`), before anything is opened.
"""

from __future__ import annotations

import ast
import itertools
import math
from pathlib import Path
from typing import Any

import pytest

import broker
from broker.errors import ConfigError

NAN = math.nan

#: (factory, bad keyword options, the option named in the error).
CASES: list[tuple[str, dict[str, Any], str]] = [
    # messages(): the consumer options
    ("messages", {"ack_deadline": 0}, "ack_deadline"),
    ("messages", {"ack_deadline": NAN}, "ack_deadline"),
    ("messages", {"ack_deadline": "soon"}, "ack_deadline"),
    ("messages", {"max_attempts": 0}, "max_attempts"),
    ("messages", {"max_attempts": 2.5}, "max_attempts"),
    ("messages", {"batch_size": 0}, "batch_size"),
    ("messages", {"batch_size": 2.5}, "batch_size"),
    ("messages", {"batch_size": True}, "batch_size"),
    ("messages", {"batch_size": math.inf}, "batch_size"),
    ("messages", {"max_attempts": math.inf}, "max_attempts"),
    ("messages", {"ack_deadline": math.inf}, "ack_deadline"),
    ("messages", {"start": "middle"}, "start"),
    # batched_messages(): its batching and the consumer options
    ("batched_messages", {"batch_size": -1}, "batch_size"),
    ("batched_messages", {"batch_size": 2.5}, "batch_size"),
    ("batched_messages", {"batch_size": "3"}, "batch_size"),
    ("batched_messages", {"batch_size": True}, "batch_size"),
    ("batched_messages", {"batch_timeout": -1}, "batch_timeout"),
    ("batched_messages", {"batch_timeout": NAN}, "batch_timeout"),
    ("batched_messages", {"batch_timeout": "x"}, "batch_timeout"),
    ("batched_messages", {"ack_deadline": -1}, "ack_deadline"),
    # receiver(): concurrency, nack_delay, drain_timeout, retry and the consumer options
    ("receiver", {"concurrency": 0}, "concurrency"),
    ("receiver", {"concurrency": -1}, "concurrency"),
    ("receiver", {"concurrency": 1.5}, "concurrency"),
    ("receiver", {"concurrency": "2"}, "concurrency"),
    ("receiver", {"concurrency": True}, "concurrency"),
    ("receiver", {"nack_delay": -1}, "nack_delay"),
    ("receiver", {"nack_delay": NAN}, "nack_delay"),
    ("receiver", {"nack_delay": "x"}, "nack_delay"),
    ("receiver", {"drain_timeout": -1}, "drain_timeout"),
    ("receiver", {"drain_timeout": NAN}, "drain_timeout"),
    ("receiver", {"drain_timeout": "x"}, "drain_timeout"),
    ("receiver", {"retry": "three times"}, "retry"),
    ("receiver", {"ack_deadline": NAN}, "ack_deadline"),
    ("receiver", {"start": "middle"}, "start"),
    # records() / batched_records()
    ("records", {"batch_size": 0}, "batch_size"),
    ("records", {"start": "middle"}, "start"),
    ("batched_records", {"batch_size": -1}, "batch_size"),
    ("batched_records", {"batch_size": 1.5}, "batch_size"),
    ("batched_records", {"batch_timeout": -1}, "batch_timeout"),
    ("batched_records", {"batch_timeout": NAN}, "batch_timeout"),
    ("batched_records", {"start": "middle"}, "start"),
    # publishers: their only options are the transactional publisher's (none on inmem)
    ("transactional_publisher", {"timeout": 5}, "timeout"),
]

_names = itertools.count()


def _call(backend: Any, factory: str, options: dict[str, Any]) -> Any:
    """``backend.<factory>(...)`` on fresh names (an existing subscription has its own checks)."""
    n = next(_names)
    if factory in ("messages", "batched_messages", "receiver"):
        return getattr(backend, factory)(f"t{n}", f"s{n}", **options)
    if factory in ("records", "batched_records"):
        return getattr(backend, factory)(f"t{n}", f"g{n}", **options)
    return getattr(backend, factory)(**options)


@pytest.mark.parametrize(
    ("factory", "options", "name"),
    CASES,
    ids=[f"{f}-{n}={o[n]!r}" for f, o, n in CASES],
)
async def test_a_bad_option_is_refused_where_it_is_given(
    factory: str, options: dict[str, Any], name: str
) -> None:
    async with broker.connect("inmem://option-checks") as backend:
        with pytest.raises(ConfigError) as caught:
            _call(backend, factory, options)
        message = str(caught.value)
        assert name in message
        if factory != "transactional_publisher":  # an unknown option has no value to show
            value = options[name]
            assert repr(value) in message or str(value) in message, message


async def test_good_options_still_make_consumers() -> None:
    async with broker.connect("inmem://option-checks-good") as backend:
        assert _call(backend, "receiver", {"concurrency": 4, "nack_delay": 0.5, "drain_timeout": 0})
        assert _call(backend, "receiver", {"nack_delay": None, "drain_timeout": None})
        assert _call(backend, "batched_messages", {"batch_size": 0, "batch_timeout": 0})
        assert _call(backend, "batched_records", {"batch_size": 5, "batch_timeout": 2})


#: The factory arguments the core checks, and the check each one goes through.
CHECKED_BY = {
    "concurrency": "check_receiver_options",
    "nack_delay": "check_receiver_options",
    "drain_timeout": "check_receiver_options",
    "retry": "check_receiver_options",
    "batch_size": "check_batching",
    "batch_timeout": "check_batching",
}


def test_every_backend_checks_factory_arguments_through_the_core() -> None:
    """A backend that defines a consumer factory of its own calls the core's check for each of
    the arguments above that it takes (read from the source: no SDK is imported)."""
    root = Path(__file__).resolve().parents[2] / "backends"
    sources = sorted(root.glob("*/backend.py"))
    assert {p.parent.name for p in sources} >= {"inmem", "kafka", "jetstream", "pubsub", "pulsar"}
    overriding = 0
    for source in sources:
        tree = ast.parse(source.read_text())
        for node in ast.walk(tree):
            if not isinstance(node, ast.FunctionDef) or node.name not in FACTORIES:
                continue
            taken = {a.arg for a in node.args.args + node.args.kwonlyargs}
            called = {
                c.func.id for c in ast.walk(node) if isinstance(c, ast.Call) and isinstance(c.func, ast.Name)
            }
            for argument in taken & set(CHECKED_BY):
                overriding += 1
                assert CHECKED_BY[argument] in called, f"{source}: {node.name}() does not check {argument}"
    assert overriding  # the backends that override a factory were found


FACTORIES = {"messages", "batched_messages", "receiver", "batched_receiver", "records", "batched_records"}


async def test_the_check_runs_before_anything_is_opened() -> None:
    """The core checks come first: a bad argument leaves no consumer behind in the backend."""
    async with broker.connect("inmem://option-checks-nothing-opened") as backend:
        for factory, options in (
            ("receiver", {"concurrency": 0}),
            ("batched_records", {"batch_timeout": -1}),
        ):
            with pytest.raises(ConfigError):
                _call(backend, factory, options)
        assert backend.broker.topics == {}  # no topic, subscription or group was made


def test_settings_made_directly_refuse_nan() -> None:
    """NaN passes every comparison, so the shared range checks test for it (not only URLs do)."""
    from broker.backends.inmem.settings import ConsumerOptions
    from broker.driver.settings import check_at_least, check_positive

    with pytest.raises(ConfigError, match="ack_deadline must be > 0 seconds, got nan"):
        ConsumerOptions(ack_deadline=NAN)
    with pytest.raises(ConfigError, match="linger must be >= 0 seconds, got nan"):
        check_at_least(0, "seconds", linger=NAN)
    with pytest.raises(ConfigError, match="close_timeout must be > 0, got nan"):
        check_positive(close_timeout=NAN)


#: The receivers broker.adapt builds over any iterator, and their bad options.
ADAPT_CASES: list[tuple[str, dict[str, Any], str]] = [
    (factory, options, name)
    for factory in ("receiver", "receiver_from_batches", "batched_receiver")
    for options, name in (
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 1.5}, "concurrency"),
        ({"nack_delay": -1}, "nack_delay"),
        ({"drain_timeout": NAN}, "drain_timeout"),
        ({"retry": "three times"}, "retry"),
    )
]


@pytest.mark.parametrize(
    ("factory", "options", "name"),
    ADAPT_CASES,
    ids=[f"adapt.{f}-{n}={o[n]!r}" for f, o, n in ADAPT_CASES],
)
async def test_adapt_receivers_refuse_a_bad_option_where_it_is_given(
    factory: str, options: dict[str, Any], name: str
) -> None:
    """``broker.adapt.receiver(it, concurrency=0)`` fails at the call, as ``backend.receiver`` does."""
    async with broker.connect("inmem://option-checks-adapt") as backend:
        source = backend.messages("t", "s") if factory == "receiver" else backend.batched_messages("t", "s")
        with pytest.raises(ConfigError) as caught:
            getattr(broker.adapt, factory)(source, **options)
        assert name in str(caught.value)


@pytest.mark.parametrize("timeout", [-1, NAN, "x", True])
async def test_a_bad_publish_timeout_is_refused(timeout: Any) -> None:
    """``publish(..., timeout=)`` and ``batch_publish`` check the number of seconds they are given."""
    async with broker.connect("inmem://option-checks-publish") as backend:
        topic = backend.publisher().topic("t")
        message = broker.OutboundMessage(b"x")
        with pytest.raises(ConfigError, match="timeout"):
            await topic.publish(message, timeout=timeout)
        with pytest.raises(ConfigError, match="timeout"):
            await topic.batch_publish(message, timeout=timeout)
        await topic.publish(message, timeout=5)


@pytest.mark.parametrize("value", ["inf", "-inf", "1e400"])
async def test_an_infinite_number_setting_is_a_config_error(value: str) -> None:
    """No setting takes infinity (none means "unbounded" by it): ``session_timeout=inf`` in a URL
    is refused with the setting's name where it is given, not later as an ``OverflowError`` from
    ``int(inf)`` when the consumer's client is configured."""
    pytest.importorskip("confluent_kafka")
    url = f"kafka://127.0.0.1:1?session_timeout={value}"
    with pytest.raises(ConfigError, match="session_timeout"):
        async with broker.connect(url) as backend:
            backend.messages("t", "s")


class Count:
    """An integer-like count (as ``numpy.int64`` is): an int through ``__index__`` only."""

    def __init__(self, value: int) -> None:
        self.value = value

    def __index__(self) -> int:
        return self.value

    def __repr__(self) -> str:
        return f"Count({self.value})"


def test_an_integer_like_count_is_accepted_and_checked() -> None:
    """Counts are checked through ``operator.index``: an integer-like value (a NumPy integer, or
    any type with ``__index__``) is accepted and range-checked; a bool, 2.5 and "3" are not."""
    from broker.driver.options import check_batching, check_count, check_receiver_options

    check_count("concurrency", Count(4))
    check_batching(Count(0), 1.0)
    check_receiver_options(concurrency=Count(2), nack_delay=None, drain_timeout=None, retry=None)
    with pytest.raises(ConfigError, match=r"concurrency must be an integer >= 1, got Count\(0\)"):
        check_count("concurrency", Count(0))
    for bad in (True, 2.5, "3", None):
        with pytest.raises(ConfigError, match="concurrency must be an integer"):
            check_count("concurrency", bad)
