"""The shared part of the backends' ``translate``: :class:`broker.driver.sdk_errors.ErrorTable`."""

from __future__ import annotations

import pytest

from broker.driver.sdk_errors import ErrorRule, ErrorTable, exception_detail
from broker.errors import AckError, BrokerError, ConfigError, Timeout, UnknownTopic


class SdkError(Exception):
    """Stands for an SDK's base exception."""

    def __init__(self, text: str = "", code: int = 0) -> None:
        super().__init__(text)
        self.code = code


class NotFound(SdkError):
    """Stands for an SDK's "no such thing"."""


TABLE = ErrorTable(
    ErrorRule(NotFound, UnknownTopic, "not found ({detail})"),
    ErrorRule(SdkError, ConfigError, when=lambda exc: exc.code == 400),
    ErrorRule(SdkError, None, "code {exc.code}", when=lambda exc: exc.code == 500),
    ErrorRule((TimeoutError, OSError), Timeout, "{kind} after a while"),
)


def test_exception_detail_falls_back_to_the_class_name() -> None:
    assert exception_detail(SdkError("boom")) == "boom"
    assert exception_detail(SdkError()) == "SdkError"


def test_broker_errors_pass_through_unchanged() -> None:
    mine = AckError("already typed")
    assert TABLE.translate(mine, "acking") is mine


def test_the_first_matching_rule_names_class_and_text() -> None:
    error = TABLE.translate(NotFound("orders", code=400), "publishing to orders")
    assert type(error) is UnknownTopic
    assert str(error) == "publishing to orders: not found (orders)"


def test_when_narrows_a_rule() -> None:
    assert type(TABLE.translate(SdkError("bad", code=400), "x")) is ConfigError
    assert type(TABLE.translate(SdkError("odd", code=1), "x")) is BrokerError


def test_a_rule_without_class_takes_the_callers_default() -> None:
    error = TABLE.translate(SdkError("down", code=500), "acking", AckError)
    assert type(error) is AckError
    assert str(error) == "acking: code 500"


@pytest.mark.parametrize("exc", [TimeoutError("t"), ConnectionResetError("c")])
def test_a_rule_may_name_several_types(exc: BaseException) -> None:
    error = TABLE.translate(exc, "receiving")
    assert type(error) is Timeout
    assert str(error) == f"receiving: {type(exc).__name__} after a while"


def test_no_match_is_the_default_with_the_fallback_text() -> None:
    error = TABLE.translate(ValueError(), "acking message 7", AckError)
    assert type(error) is AckError
    assert str(error) == "acking message 7: ValueError"
    assert error.__cause__ is None


def test_fallback_detail_and_chain_are_per_table() -> None:
    table = ErrorTable(fallback="{kind}: {exc}", detail=str, chain=True)
    cause = ValueError("odd")
    error = table.translate(cause, "pulling")
    assert str(error) == "pulling: ValueError: odd"
    assert error.__cause__ is cause
    bare = ErrorTable(ErrorRule(ValueError, ConfigError), detail=str)
    assert str(bare.translate(ValueError(), "x")) == "x: "


def test_braces_in_the_detail_are_kept() -> None:
    assert str(TABLE.translate(NotFound("{name}"), "x")) == "x: not found ({name})"
