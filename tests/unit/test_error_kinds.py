"""Every portable error names its kind in one stable word, the same whichever backend raised it."""

from __future__ import annotations

import importlib

import pytest

from broker import errors
from broker.errors import KINDS, BrokerError


def test_each_class_has_its_own_kind() -> None:
    classes = [getattr(errors, name) for name in errors.__all__ if name != "KINDS"]
    kinds = [cls.kind for cls in classes]
    assert len(set(kinds)) == len(classes), "two classes share a kind"
    assert all(kind.replace("_", "").isalpha() and kind.islower() for kind in kinds)
    assert {kind: KINDS[kind] for kind in kinds} == {cls.kind: cls for cls in classes}


def test_the_kinds_callers_rely_on() -> None:
    assert errors.Timeout("t").kind == "timeout"
    assert errors.UnknownTopic("t").kind == "not_found"
    assert errors.ConnectionFailed("c").kind == "unavailable"
    assert errors.AuthenticationFailed("a").kind == "unauthenticated"
    assert errors.Throttled("q").kind == "throttled"
    assert BrokerError("x").kind == "unknown"


@pytest.mark.parametrize(
    ("module", "name", "kind"),
    [
        ("broker.backends.jetstream.publisher", "PubAckError", "publish_failed"),
        ("broker.backends.kafka.processor.errors", "ProcessorError", "unknown"),
        ("broker.backends.kafka.processor.errors", "TableNotReady", None),
    ],
)
def test_backend_subclasses_keep_the_portable_kind(module: str, name: str, kind: str | None) -> None:
    cls = getattr(importlib.import_module(module), name)
    parent = next(base for base in cls.__mro__ if base.__module__ == "broker.errors")
    assert cls.kind == parent.kind == (kind or parent.kind)


def test_translated_sdk_errors_carry_their_kind() -> None:
    translate = pytest.importorskip("broker.backends.servicebus.errors").translate
    sb = pytest.importorskip("azure.servicebus.exceptions")
    assert translate(sb.OperationTimeoutError(message="slow"), "receiving").kind == "timeout"
    assert translate(sb.MessagingEntityNotFoundError(message="gone"), "sending").kind == "not_found"
    assert translate(RuntimeError("?"), "sending", errors.PublishError).kind == "publish_failed"
