"""The public API is what docs/versioning.md lists; the top of ``broker/`` holds only application code.

The lists between the ``public-api`` and ``driver-api`` markers of docs/versioning.md are read and compared
with the code: each listed module imports and exports (``__all__``) only names that exist and carry a
docstring; every module at the top of ``broker/`` is either listed or exports nothing that ``broker``
does not re-export (so a module of the driver kit left at the top fails); ``broker.__all__`` holds no
name of the driver kit; the names that moved still import from their old place, with a warning.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import re
import warnings
from pathlib import Path
from types import ModuleType

import pytest

import broker
import broker.driver
import broker.testing

ROOT = Path(__file__).resolve().parents[2]
VERSIONING = (ROOT / "docs" / "versioning.md").read_text()


def listed(marker: str) -> list[str]:
    """The module names in backticks between ``<!-- marker -->`` and ``<!-- /marker -->``."""
    block = VERSIONING.split(f"<!-- {marker} -->")[1].split(f"<!-- /{marker} -->")[0]
    names = re.findall(r"`(broker(?:\.[a-z_]+)*)`", block)
    # the entry-point group shares its name with the package of the backends: not a module entry
    return sorted({n for n in names if is_module(n) and n != "broker.backends"})


def is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ModuleNotFoundError:
        return False
    return True


PUBLIC = listed("public-api")
DRIVER = listed("driver-api")


def exported(module: ModuleType) -> list[str]:
    names = getattr(module, "__all__", None)
    assert isinstance(names, list | tuple), f"{module.__name__} has no __all__"
    return list(names)


def test_the_documented_lists_name_the_packages_the_issue_makes_public() -> None:
    for name in (
        "broker",
        "broker.adapt",
        "broker.codecs",
        "broker.errors",
        "broker.log",
        "broker.typed",
        "broker.schemas",
        "broker.telemetry",
        "broker.testing",
        "broker.sync",
        "broker.backends.kafka.queue",
        "broker.backends.kafka.processor",
        "broker.backends.kafka.client",
    ):
        assert name in PUBLIC, name
    assert "broker.driver" in DRIVER and "broker.driver.testing" in DRIVER
    assert not set(PUBLIC) & set(DRIVER)
    assert not any(name.startswith("broker.driver") for name in PUBLIC)


@pytest.mark.parametrize("name", PUBLIC + DRIVER)
def test_every_exported_name_exists_and_is_documented(name: str) -> None:
    module = importlib.import_module(name)
    assert module.__doc__, f"{name} has no docstring"
    for attr in exported(module):
        assert not attr.startswith("_") or attr == "__version__", f"{name}.{attr}"
        value = getattr(module, attr)  # raises if __all__ names something missing
        if inspect.isclass(value) or inspect.isfunction(value):
            assert value.__doc__, f"{name}.{attr} has no docstring"


def top_level_modules() -> list[str]:
    return sorted(
        f"broker.{info.name}"
        for info in pkgutil.iter_modules(broker.__path__)
        if info.name not in {"backends", "contrib", "driver", "cli", "__main__"}
    )


def test_the_top_of_broker_holds_only_application_facing_modules() -> None:
    """A module at the top of ``broker/`` is listed public, or everything it exports is re-exported by
    ``broker`` (``broker.message``, ``broker.interfaces``, ...): a driver-kit module left there fails."""
    public_names = set(broker.__all__)
    stray = {}
    for name in top_level_modules():
        if name in PUBLIC:
            continue
        module = importlib.import_module(name)
        extra = set(exported(module)) - public_names
        if extra:
            stray[name] = sorted(extra)
    assert stray == {}, f"not application API, belongs in broker.driver (or re-export it): {stray}"


def test_broker_exports_no_driver_kit_name() -> None:
    assert not set(broker.__all__) & set(broker.driver.__all__)
    for name in broker.__all__:
        value = getattr(broker, name)
        module = getattr(value, "__module__", "") or ""
        assert not module.startswith("broker.driver"), f"broker.{name} comes from {module}"


def test_the_driver_kit_exports_resolve() -> None:
    for name in broker.driver.__all__:
        assert getattr(broker.driver, name) is not None
    assert sorted(dir(broker.driver)) == sorted(broker.driver.__all__)
    with pytest.raises(AttributeError):
        _ = broker.driver.nothing_by_this_name  # type: ignore[attr-defined]


MOVED = re.findall(r"^\| `([\w.]+)` \| `([\w.]+)` \|$", VERSIONING, flags=re.M)


def test_the_moved_table_is_there() -> None:
    assert len(MOVED) >= 10


@pytest.mark.parametrize(("old", "new"), MOVED)
def test_a_moved_name_imports_from_its_old_place_with_a_warning(old: str, new: str) -> None:
    old_module, _, name = old.rpartition(".")
    new_module, _, new_name = new.rpartition(".")
    with pytest.warns(DeprecationWarning, match=re.escape(new)):
        value = getattr(importlib.import_module(old_module), name)
    assert value is getattr(importlib.import_module(new_module), new_name)
    assert name not in exported(importlib.import_module(old_module))


def test_the_plain_api_imports_without_deprecation_warnings() -> None:
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for name in PUBLIC:
            module = importlib.import_module(name)
            for attr in exported(module):
                getattr(module, attr)


def test_an_unknown_name_is_an_attribute_error() -> None:
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = broker.Nothing  # type: ignore[attr-defined]
    with pytest.raises(AttributeError, match="no attribute 'Nothing'"):
        _ = broker.testing.Nothing  # type: ignore[attr-defined]
