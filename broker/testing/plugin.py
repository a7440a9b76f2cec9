"""The polybroker pytest plugin: an application's tests on ``inmem://``, and the same tests on a real broker.

Installed with the package (entry point ``pytest11``); it imports no backend and no SDK when
loaded and does nothing in a test that does not use it. What it offers:

- ``polybroker_backend``: a fresh, isolated in-memory backend per test, closed and forgotten
  after it. With ``--polybroker-url URL`` (or ``POLYBROKER_TEST_URL``) it connects to that broker
  instead, so the same test module runs on Kafka, NATS, ... in CI.
- ``polybroker_name``: ``polybroker_name("orders")`` is a topic or subscription name unique to
  the test (the same for the same base within a test), so tests never share a real broker's
  topics.
- ``@pytest.mark.polybroker_virtual_time``: the test body runs in virtual time
  (:mod:`broker.testing.virtual_time`): time advances only when every task waits, so a 30 s ack
  deadline passes at once. Skipped, with the reason, against a real broker.
- ``polybroker_recorder``: a :class:`~broker.testing.recorder.PublishRecorder` watching every
  publisher of ``polybroker_backend``.
- ``polybroker_faults``: the fault-injection API of the test's in-memory broker
  (``InmemBackend.faults``, ``backends/inmem/faults.py``); tests using it are skipped against a
  real broker.

Async fixtures are ``pytest_asyncio`` fixtures, so they work in its strict and auto modes (a test
in strict mode still needs ``@pytest.mark.asyncio``).
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from typing import TYPE_CHECKING, Any, TypeVar, cast

import pytest

from broker.testing.recorder import PublishRecorder
from broker.testing.virtual_time import check_virtual_time_url, virtual_time

if TYPE_CHECKING:
    from broker.backend import Backend, FaultInjection

try:
    import pytest_asyncio

    _fixture: Any = pytest_asyncio.fixture
except ImportError:  # pragma: no cover - async tests need pytest-asyncio (or the fixtures say so)
    _fixture = pytest.fixture

_F = TypeVar("_F", bound=Callable[..., Any])


def _async_fixture(func: _F) -> _F:
    """An async fixture that runs in pytest-asyncio's strict and auto modes."""
    return cast(_F, _fixture(func))


__all__ = [
    "ENV_URL",
    "VIRTUAL_TIME_MARK",
    "polybroker_backend",
    "polybroker_faults",
    "polybroker_name",
    "polybroker_recorder",
    "polybroker_url",
]

#: The environment variable read when ``--polybroker-url`` is not given.
ENV_URL = "POLYBROKER_TEST_URL"
#: The marker that runs a test body in virtual time.
VIRTUAL_TIME_MARK = "polybroker_virtual_time"


def pytest_addoption(parser: pytest.Parser) -> None:
    """``--polybroker-url``."""
    group = parser.getgroup("polybroker", "polybroker test kit")
    group.addoption(
        "--polybroker-url",
        dest="polybroker_url",
        default=None,
        metavar="URL",
        help=f"run polybroker_backend tests against this broker instead of inmem:// (env {ENV_URL})",
    )


def pytest_configure(config: pytest.Config) -> None:
    """Register the marker (``--strict-markers`` passes); ``--polybroker-url`` also names the broker
    ``app.testing()`` runs an application on (through ``POLYBROKER_TEST_URL``)."""
    url = config.getoption("polybroker_url", None)
    if url:
        before = os.environ.get(ENV_URL)
        os.environ[ENV_URL] = url

        def restore() -> None:  # an in-process run (pytester) leaves the outer run's environment as it was
            if before is None:
                os.environ.pop(ENV_URL, None)
            else:
                os.environ[ENV_URL] = before

        config.add_cleanup(restore)
    config.addinivalue_line(
        "markers",
        f"{VIRTUAL_TIME_MARK}: run the test body in virtual time on inmem:// (skipped against a real broker)",
    )


def _configured_url(config: pytest.Config) -> str | None:
    url = config.getoption("polybroker_url", None) or os.environ.get(ENV_URL) or None
    return url if url and not url.startswith("inmem:") else None


def pytest_report_header(config: pytest.Config) -> str | None:
    """Name the real broker the polybroker fixtures use, if any."""
    url = _configured_url(config)
    return f"polybroker: tests run against {url.split('?', 1)[0]}" if url else None


def pytest_runtest_setup(item: pytest.Item) -> None:
    """Skip a virtual-time test against a real broker, with the reason."""
    if item.get_closest_marker(VIRTUAL_TIME_MARK) is None:
        return
    url = _configured_url(item.config)
    if url is not None:
        try:
            check_virtual_time_url(url)
        except Exception as exc:
            pytest.skip(f"{VIRTUAL_TIME_MARK}: {exc}")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    """Run a ``polybroker_virtual_time`` test's body in virtual time (its fixtures run in real time)."""
    if item.get_closest_marker(VIRTUAL_TIME_MARK) is None or not isinstance(item, pytest.Function):
        return (yield)
    original = item.obj
    if not inspect.iscoroutinefunction(original):
        raise pytest.UsageError(f"{item.nodeid}: {VIRTUAL_TIME_MARK} needs an async test (async def)")

    @functools.wraps(original)
    async def in_virtual_time(*args: Any, **kwargs: Any) -> Any:
        with virtual_time():
            return await original(*args, **kwargs)

    item.obj = in_virtual_time
    try:
        return (yield)
    finally:
        item.obj = original


@pytest.fixture
def polybroker_url(request: pytest.FixtureRequest) -> str | None:
    """The real broker URL the tests run against (``--polybroker-url``/``POLYBROKER_TEST_URL``), or None."""
    return _configured_url(request.config)


@pytest.fixture
def polybroker_name(request: pytest.FixtureRequest) -> Callable[[str], str]:
    """``polybroker_name(base)``: a topic or subscription name unique to this test (stable within it)."""
    suffix = uuid.uuid4().hex[:10]
    test = re.sub(r"[^A-Za-z0-9]+", "-", request.node.name).strip("-")[:40] or "test"
    names: dict[str, str] = {}

    def name(base: str) -> str:
        found = names.get(base)
        if found is None:
            found = names[base] = f"{base}-{test}-{suffix}"
        return found

    return name


@_async_fixture
async def polybroker_backend(polybroker_url: str | None) -> AsyncIterator[Backend]:
    """A backend for this test: a fresh in-memory broker (closed and forgotten after), or the real one."""
    import broker

    if polybroker_url is not None:
        async with broker.connect(polybroker_url) as backend:
            yield backend
        return
    backend = broker.connect(f"inmem://polybroker-test-{uuid.uuid4().hex}")
    try:
        async with backend:
            yield backend
    finally:
        backend.forget()  # type: ignore[attr-defined]  # InmemBackend.forget: the broker's state goes


@pytest.fixture
def polybroker_recorder(polybroker_backend: Backend) -> PublishRecorder:
    """A :class:`~broker.testing.recorder.PublishRecorder` of everything ``polybroker_backend`` publishes."""
    recorder = PublishRecorder()
    recorder.watch(polybroker_backend)
    return recorder


@pytest.fixture
def polybroker_faults(request: pytest.FixtureRequest, polybroker_url: str | None) -> FaultInjection:
    """Fault injection on the test's in-memory broker (``broker.backends.inmem.faults.Faults``).

    Skipped, with the reason, against a real broker.
    """
    if polybroker_url is not None:
        pytest.skip(f"polybroker_faults: fault injection is for inmem:// only, not {polybroker_url}")
    backend: Backend = request.getfixturevalue("polybroker_backend")
    return backend.faults
