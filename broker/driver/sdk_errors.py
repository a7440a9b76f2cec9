"""The part of every backend's ``translate(exc, doing, default)`` that does not depend on its SDK.

A backend declares its own mapping as an :class:`ErrorTable` of :class:`ErrorRule` rows (SDK
exception types -> :mod:`broker.errors` class) and calls :meth:`ErrorTable.translate`, which
holds what all backends do alike: broker errors pass through unchanged, the message is
``f"{doing}: {text}"``, the first matching row names the class, and anything else becomes the
caller's ``default``::

    _ERRORS = ErrorTable(
        ErrorRule(sdk.NotFound, UnknownTopic),
        ErrorRule(sdk.Busy, Throttled, "the server is busy ({detail})"),
    )
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from broker.errors import BrokerError

__all__ = ["ErrorRule", "ErrorTable", "exception_detail"]


def exception_detail(exc: BaseException) -> str:
    """``str(exc)``, or the name of ``exc``'s class when that is empty."""
    return str(exc) or type(exc).__name__


@dataclass(frozen=True, slots=True)
class ErrorRule:
    """One row of an :class:`ErrorTable`: SDK exceptions of the types ``sdk`` become ``error``.

    ``text`` is what follows ``"{doing}: "`` in the message: a :meth:`str.format` template that may
    use ``{detail}`` (the table's detail of the exception), ``{exc}`` (the exception itself, also
    ``{exc.attribute}``) and ``{kind}`` (the name of its class).
    """

    #: The SDK exception class (or classes) the row is about.
    sdk: type[BaseException] | tuple[type[BaseException], ...]
    #: The broker error class they become (None: the caller's ``default``).
    error: type[BrokerError] | None
    #: The message after ``"{doing}: "``.
    text: str = "{detail}"
    #: Narrows the row to the exceptions for which this returns True (None: all of ``sdk``).
    when: Callable[[Any], bool] | None = None

    def matches(self, exc: BaseException) -> bool:
        """True when ``exc`` is one of ``sdk`` and passes ``when``."""
        return isinstance(exc, self.sdk) and (self.when is None or self.when(exc))


@dataclass(frozen=True, slots=True, init=False)
class ErrorTable:
    """A backend's mapping from SDK exceptions to :mod:`broker.errors`, tried row by row."""

    #: The rows, the first match wins (so put subclasses before their bases).
    rules: tuple[ErrorRule, ...]
    #: The message after ``"{doing}: "`` of the ``default`` error when no row matches.
    fallback: str
    #: What ``{detail}`` is for an exception.
    detail: Callable[[BaseException], str]
    #: Set the SDK's exception as the error's ``__cause__`` here (for errors not raised ``from`` it).
    chain: bool

    def __init__(
        self,
        *rules: ErrorRule,
        fallback: str = "{detail}",
        detail: Callable[[BaseException], str] = exception_detail,
        chain: bool = False,
    ) -> None:
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "fallback", fallback)
        object.__setattr__(self, "detail", detail)
        object.__setattr__(self, "chain", chain)

    def translate(
        self, exc: BaseException, doing: str, default: type[BrokerError] = BrokerError
    ) -> BrokerError:
        """The broker error for SDK exception ``exc`` raised while ``doing``; broker errors pass through.

        The first row that matches ``exc`` names the class and the text; with none, it is
        ``default`` with :attr:`fallback`.
        """
        if isinstance(exc, BrokerError):
            return exc
        error_class, text = default, self.fallback
        for rule in self.rules:
            if rule.matches(exc):
                error_class, text = rule.error or default, rule.text
                break
        error = error_class(
            f"{doing}: " + text.format(detail=self.detail(exc), exc=exc, kind=type(exc).__name__)
        )
        if self.chain:
            error.__cause__ = exc
        return error
