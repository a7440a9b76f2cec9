"""The shared parts of a backend's registration and of ``BackendBase``.

``broker.driver.registration.BackendRegistration`` (the lazy ``open``, URL checks), capabilities declared
once through ``Capabilities.claiming`` over a factory's ``mechanisms``, and the ``BackendBase``
hooks the backends share.
"""

from __future__ import annotations

import dataclasses
import importlib
import sys
import types
from collections.abc import Iterator
from importlib.metadata import entry_points
from typing import Any

import pytest

from broker.capabilities import Capabilities
from broker.driver.base import BackendBase, Batching
from broker.driver.registration import BackendRegistration, no_path, one_host
from broker.driver.settings import ParsedUrl, parse_url
from broker.errors import ConfigError, MissingDependency
from broker.interfaces import Publisher
from broker.retry import DeadLetterTopic, RetryPolicy

BACKENDS = ("inmem", "jetstream", "kafka", "pubsub", "pulsar", "rabbitmq", "redis", "servicebus")


@dataclasses.dataclass(frozen=True)
class ToySettings:
    name: str = "toy"


class ToyBackend(BackendBase):
    name = "toy"

    def __init__(self, settings: ToySettings) -> None:
        super().__init__()
        self.settings = settings


class ToyFactory(BackendRegistration):
    extra = "toy"
    settings_type = ToySettings
    sdk = "toy_sdk.aio"
    sdk_package = "toy_sdk"
    backend = "toy_backend_module:ToyBackend"
    mechanisms = {"messages": "toy queue"}

    def url_options(self, url: ParsedUrl) -> dict[str, Any]:
        return {}


@pytest.fixture
def toy_modules(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """A fake SDK (``toy_sdk.aio``) and backend module; yields the names imported, in order."""
    imported: list[str] = []
    real_import = importlib.import_module

    def import_module(name: str, package: str | None = None) -> types.ModuleType:
        imported.append(name)
        return real_import(name, package)

    sdk = types.ModuleType("toy_sdk")
    sdk_aio = types.ModuleType("toy_sdk.aio")
    backend_module = types.ModuleType("toy_backend_module")
    backend_module.ToyBackend = ToyBackend  # type: ignore[attr-defined]
    for module in (sdk, sdk_aio, backend_module):
        monkeypatch.setitem(sys.modules, module.__name__, module)
    monkeypatch.setattr(importlib, "import_module", import_module)
    yield imported


def test_open_imports_the_sdk_then_the_backend(toy_modules: list[str]) -> None:
    backend = ToyFactory().open(ToySettings("x"))
    assert isinstance(backend, ToyBackend)
    assert backend.settings == ToySettings("x")
    assert toy_modules == ["toy_sdk.aio", "toy_backend_module"]


def test_open_without_the_sdk_names_the_extra_and_the_package(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "toy_sdk.aio", None)  # an import of it raises ImportError
    with pytest.raises(MissingDependency, match=r"provides 'toy_sdk'.*polybroker\[toy\]") as caught:
        ToyFactory().open(ToySettings())
    assert caught.value.extra == "toy"
    assert isinstance(caught.value.__cause__, ImportError)


def test_open_without_an_sdk_imports_only_the_backend(toy_modules: list[str]) -> None:
    class NoSdk(ToyFactory):
        sdk = ""

    assert isinstance(NoSdk().open(ToySettings()), ToyBackend)
    assert toy_modules == ["toy_backend_module"]


def test_url_options_is_abstract() -> None:
    class Incomplete(BackendRegistration):
        backend = "toy_backend_module:ToyBackend"

    with pytest.raises(TypeError, match="url_options"):
        Incomplete()  # type: ignore[abstract]


def test_one_host() -> None:
    assert one_host(parse_url("x://h"), "thing") == "h"
    assert one_host(parse_url("x://"), "thing") is None
    with pytest.raises(ConfigError, match=r"^a x:// URL names one thing, got a, b:1$"):
        one_host(parse_url("x://a,b:1"), "thing")


def test_no_path() -> None:
    no_path(parse_url("x://h"))
    no_path(parse_url("x://h/"))
    with pytest.raises(ConfigError, match=r"^a x:// URL has no path, got '/p'$"):
        no_path(parse_url("x://h/p"))
    with pytest.raises(ConfigError, match=r"^a x:// URL has no path, got '/p'; do this$"):
        no_path(parse_url("x://h/p"), "do this")


def test_capabilities_claiming() -> None:
    claimed = Capabilities.claiming({"messages": "a queue", "replay": "seek"}, max_message_bytes=10)
    assert claimed == Capabilities(messages=True, replay=True, max_message_bytes=10)
    assert Capabilities.claiming(["messages", "replay"], replay=False) == Capabilities(messages=True)
    with pytest.raises(ValueError, match="not capability flags: max_message_bytes, nonsense"):
        Capabilities.claiming(["nonsense", "max_message_bytes"])


@pytest.mark.parametrize("name", BACKENDS)
def test_each_factory_names_its_backend_and_real_capabilities(name: str) -> None:
    # The factory the library finds: the backend's entry point (rabbitmq's is its package root); a
    # backend registered under two schemes (redis, rediss) has one factory behind both.
    package = f"broker.backends.{name}"
    (factory,) = {ep.load() for ep in entry_points(group="broker.backends") if ep.module.startswith(package)}
    assert isinstance(factory, BackendRegistration)
    module, _, cls = factory.backend.partition(":")
    assert module == f"broker.backends.{name}.backend"
    Capabilities.claiming(factory.mechanisms)  # every name is a capability flag
    if factory.sdk:
        pytest.importorskip(factory.sdk)
    backend_type = getattr(importlib.import_module(module), cls)
    assert issubclass(backend_type, BackendBase)


# -- BackendBase ---------------------------------------------------------------------------------
class _Closing:
    def __init__(self) -> None:
        self.closed = False

    async def close(self) -> None:
        self.closed = True


async def test_backend_base_is_an_async_context_manager() -> None:
    base = BackendBase()
    resource = base._track(_Closing())
    async with base as entered:
        assert entered is base
    assert resource.closed


class _Publishing(BackendBase):
    def __init__(self) -> None:
        super().__init__()
        self.made = 0
        self.message_options: list[dict[str, Any]] = []

    def publisher(self) -> Publisher:
        self.made += 1
        return object()  # type: ignore[return-value]

    def _message_options(self, options: dict[str, Any]) -> Any:
        self.message_options.append(options)
        return options

    def _open_messages(self, topic: str, subscription: str, options: Any, batching: Batching | None) -> Any:
        return (topic, subscription, options, batching)


def test_publisher_for_retry_only_for_a_dead_letter_topic_without_a_publisher() -> None:
    backend = _Publishing()
    assert backend._publisher_for_retry(None) is None
    assert backend._publisher_for_retry(RetryPolicy()) is None
    given = object()
    named = DeadLetterTopic("dead", publisher=given)  # type: ignore[arg-type]
    assert backend._publisher_for_retry(RetryPolicy(dead_letter=named)) is None
    assert backend.made == 0
    assert backend._publisher_for_retry(RetryPolicy(dead_letter=DeadLetterTopic("dead"))) is not None
    assert backend.made == 1


def test_message_options_hook_feeds_messages_and_batched_messages() -> None:
    backend = _Publishing()
    opened: Any = backend.messages("t", "s", knob=1)
    assert opened == ("t", "s", {"knob": 1}, None)
    opened = backend.batched_messages("t", "s", batch_size=5, batch_timeout=0.5, knob=2)
    assert opened == ("t", "s", {"knob": 2}, Batching(5, 0.5))
    assert backend.message_options == [{"knob": 1}, {"knob": 2}]


def test_message_options_default_to_the_consumer_options() -> None:
    with pytest.raises(ConfigError, match="unknown consumer options for backend: knob"):
        BackendBase().messages("t", "s", knob=1)
