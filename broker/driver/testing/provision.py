"""Conformance tests of the ``provision`` setting (:mod:`broker.driver.provision`) on every backend.

Every backend rejects a mode that is no mode, and a mode it does not implement, with a
``ConfigError`` when it is made (never a silent ``create``); a backend that implements ``verify``
names a missing topic in a ``ProvisioningError`` instead of creating it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker.connect import connect
from broker.driver.provision import PROVISION_MODES
from broker.driver.testing.harness import Harness
from broker.errors import ConfigError, ProvisioningError
from broker.message import OutboundMessage

__all__ = ["ProvisionSuite", "with_setting"]


def with_setting(url: str | Mapping[str, Any], name: str, value: str) -> str | dict[str, Any]:
    """``url`` (a URL or a ``connect`` mapping) with the setting ``name=value`` added."""
    if isinstance(url, str):
        return f"{url}{'&' if '?' in url else '?'}{name}={value}"
    return {**url, name: value}


def _modes(harness: Harness) -> tuple[str, ...]:
    """The ``provision`` modes the harness's backend declares (``create`` for one that declares none)."""
    return tuple(getattr(harness.backend, "provision_modes", ("create",)))


class ProvisionSuite:
    """The ``provision`` contract on every backend (mixed into the conformance suite)."""

    async def test_provision_rejects_unknown_and_unimplemented_modes(self, harness: Harness) -> None:
        """``provision=<not a mode>`` is a ``ConfigError``; so is every mode the backend does not
        declare in ``provision_modes``, naming the backend, when it is made."""
        if harness.url is None:
            pytest.skip("the harness names no url to connect with other settings")
        with pytest.raises(ConfigError, match=r"provision.*'sometimes'"):
            connect(with_setting(harness.url, "provision", "sometimes"))
        modes = _modes(harness)
        assert "create" in modes, f"every backend implements provision='create', not only {modes}"
        name = re.escape(str(getattr(harness.backend, "name", "")))
        for mode in PROVISION_MODES:
            if mode in modes:
                continue
            with pytest.raises(ConfigError, match=rf"{name}: provision='{mode}' is not implemented"):
                connect(with_setting(harness.url, "provision", mode))

    async def test_provision_verify_names_a_missing_topic(self, harness: Harness) -> None:
        """Under ``verify``, publishing to and consuming from a topic nobody made raise
        ``ProvisioningError`` naming it, and the topic is not created by trying."""
        modes = _modes(harness)
        if "verify" not in modes:
            pytest.skip(f"the backend does not implement provision='verify' (provision_modes={modes})")
        if harness.url is None:
            pytest.skip("the harness names no url to connect with other settings")
        topic = harness.name("unprovisioned")
        async with connect(with_setting(harness.url, "provision", "verify")) as backend:
            with pytest.raises(ProvisioningError) as published:
                await backend.publisher().topic(topic).publish(OutboundMessage(b"nowhere"))
            assert any(topic in name for name in published.value.missing), published.value.missing
            with pytest.raises(ProvisioningError) as consumed:
                async with backend.messages(topic, harness.name("sub")) as consumer:
                    await consumer.next_message(timeout=harness.patience)
            assert any(topic in name for name in consumed.value.missing), consumed.value.missing
            with pytest.raises(ProvisioningError):  # trying created nothing
                await backend.publisher().topic(topic).publish(OutboundMessage(b"still nowhere"))
