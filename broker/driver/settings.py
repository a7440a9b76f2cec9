"""Settings dataclasses: building them from URLs and mappings, and keeping secrets out of logs.

A backend describes each role's settings as a dataclass. :func:`build_settings` fills one
from a mapping whose values may be strings (URL query parameters) or already-typed values,
coercing ``int``, ``float``, ``bool``, ``str``, ``tuple[str, ...]`` and ``X | None``.
Unknown keys raise :class:`~broker.errors.UnknownSetting`; bad values raise
:class:`~broker.errors.ConfigError`. Fields declared with :func:`secret` are hidden from
``repr`` and from :func:`describe`.
"""

from __future__ import annotations

import dataclasses
import math
import types
import typing
from collections.abc import Mapping
from typing import Any, TypeVar
from urllib.parse import parse_qsl, unquote, urlsplit, urlunsplit

from broker.errors import ConfigError, UnknownSetting

__all__ = [
    "ParsedUrl",
    "build_settings",
    "check_at_least",
    "check_positive",
    "describe",
    "field_values",
    "normalize_choices",
    "options_from",
    "parse_url",
    "redact_url",
    "secret",
    "with_default_port",
]

T = TypeVar("T")

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def secret(default: Any = None) -> Any:
    """A dataclass field for a credential: excluded from ``repr`` and masked by :func:`describe`."""
    return dataclasses.field(default=default, repr=False, metadata={"secret": True})


@dataclasses.dataclass(frozen=True, slots=True)
class ParsedUrl:
    """A backend URL split into parts: ``scheme://[user[:password]@]host[,host...][/path][?query]``."""

    scheme: str
    hosts: tuple[str, ...]
    path: str
    query: Mapping[str, str] = dataclasses.field(repr=False)  # may carry credentials
    username: str | None = None
    password: str | None = dataclasses.field(default=None, repr=False)

    def credentials(self, user: str, password: str, *, decode: bool = False) -> dict[str, str]:
        """The URL's ``user:password@`` as the settings named ``user`` and ``password``.

        A part the URL does not give is left out; ``decode`` undoes its percent-encoding.
        """
        options: dict[str, str] = {}
        for setting, value in ((user, self.username), (password, self.password)):
            if value is not None:
                options[setting] = unquote(value) if decode else value
        return options


def parse_url(url: str) -> ParsedUrl:
    """Split a backend URL; raises :class:`~broker.errors.ConfigError` when it is not one."""
    if not isinstance(url, str) or "://" not in url:
        raise ConfigError(f"not a broker URL (expected scheme://...): {redact_url(str(url))!r}")
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise ConfigError(f"not a broker URL ({exc}): {redact_url(url)!r}") from None
    scheme = parts.scheme.lower()
    if not scheme or not scheme.replace("+", "").replace("-", "").isalnum():
        raise ConfigError(f"not a broker URL (bad scheme): {redact_url(url)!r}")
    netloc = parts.netloc
    username = password = None
    if "@" in netloc:
        userinfo, netloc = netloc.rsplit("@", 1)
        username, _, pw = userinfo.partition(":")
        password = pw or None
    hosts = tuple(h for h in netloc.split(",") if h)
    for host in hosts:
        _check_host(host, url)
    query: dict[str, str] = {}
    for key, value in parse_qsl(parts.query, keep_blank_values=True, strict_parsing=False):
        if key in query:
            raise ConfigError(f"setting {key!r} is given twice in the URL")
        query[key] = value
    return ParsedUrl(scheme, hosts, parts.path, query, username or None, password)


def _check_host(host: str, url: str) -> None:
    """Raise ConfigError for a ``host[:port]`` that no client could dial (bad port, bare IPv6)."""
    if host.startswith("["):
        address, bracket, rest = host[1:].partition("]")
        if not bracket or not address or (rest and not rest.startswith(":")):
            raise ConfigError(f"bad host {host!r} in {redact_url(url)!r}: write IPv6 as [addr]:port")
        port = rest[1:] if rest else None
    elif host.count(":") > 1:
        raise ConfigError(f"bad host {host!r} in {redact_url(url)!r}: write IPv6 as [addr]:port")
    else:
        name, colon, port_text = host.partition(":")
        if not name:
            raise ConfigError(f"bad host {host!r} in {redact_url(url)!r}: the host name is empty")
        port = port_text if colon else None
    if port is not None and not (port.isdigit() and 0 < int(port) < 65536):
        raise ConfigError(f"bad port {port!r} in {redact_url(url)!r}: ports are 1-65535")


def with_default_port(host: str, port: int) -> str:
    """``host`` (``name[:port]`` or ``[v6][:port]``) with ``port`` added when it names none."""
    has_port = "]:" in host if host.startswith("[") else ":" in host
    return host if has_port else f"{host}:{port}"


def redact_url(url: str) -> str:
    """``url`` with any password (and credential-like query values) replaced by ``***``."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "<unparseable url>"
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, host = netloc.rsplit("@", 1)
        user = userinfo.partition(":")[0]
        netloc = f"{user}:***@{host}" if ":" in userinfo else f"{user}@{host}"
    query = "&".join(
        f"{k}=***" if _looks_secret(k) else (f"{k}={v}" if v else k)
        for k, v in parse_qsl(parts.query, keep_blank_values=True)
    )
    if looks_like_connection_string(url):
        return "Endpoint=***"
    return urlunsplit((parts.scheme, netloc, parts.path, query, ""))


def looks_like_connection_string(text: str) -> bool:
    """True for an Azure-style connection string (``Key=value;Key=value``, keys in any order),
    which is taken where a URL is and must never be shown (it may carry a key)."""
    key, sep, _ = text.split(";", 1)[0].partition("=")
    return bool(sep) and key.strip().isalpha()


def _looks_secret(name: str) -> bool:
    lowered = name.lower()
    return any(word in lowered for word in ("password", "secret", "token", "key", "credential", "sasl"))


def _coerce(name: str, value: Any, hint: Any) -> Any:
    origin = typing.get_origin(hint)
    if origin is typing.Union or origin is types.UnionType:
        args = typing.get_args(hint)
        if value is None and type(None) in args:
            return None
        if isinstance(value, str) and value.lower() in ("", "none", "null") and type(None) in args:
            return None
        errors = []
        for arg in args:
            if arg is type(None):
                continue
            try:
                return _coerce(name, value, arg)
            except ConfigError as exc:
                errors.append(str(exc))
        raise ConfigError("; ".join(errors) or f"setting {name!r}: bad value {value!r}")
    if origin is typing.Literal:
        allowed = typing.get_args(hint)
        if value in allowed:
            return value
        if isinstance(value, str):
            # enumerated values are matched in any case, as librdkafka does (``SASL_SSL``, ``plain``),
            # and kept in the spelling the SDK wants
            for choice in allowed:
                if isinstance(choice, str) and choice.casefold() == value.casefold():
                    return choice
        raise ConfigError(f"setting {name!r} must be one of {', '.join(map(repr, allowed))}, got {value!r}")
    if origin in (tuple, list):
        if isinstance(value, str):
            items: list[Any] = [v.strip() for v in value.split(",") if v.strip()]
        elif isinstance(value, list | tuple):
            items = list(value)
        else:
            raise ConfigError(f"setting {name!r} must be a list, got {type(value).__name__}")
        args = typing.get_args(hint)
        item_hint = args[0] if args else str
        coerced = [_coerce(name, item, item_hint) for item in items]
        return tuple(coerced) if origin is tuple else coerced
    if origin in (dict, Mapping) or hint in (dict, Mapping):
        if isinstance(value, Mapping):
            return dict(value)
        raise ConfigError(f"setting {name!r} must be a mapping, got {type(value).__name__}")
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in _TRUE | _FALSE:
            return value.lower() in _TRUE
        raise ConfigError(f"setting {name!r} must be true or false, got {value!r}")
    if hint is int or hint is float:
        what = "an integer" if hint is int else "a number"
        if isinstance(value, bool):
            raise ConfigError(f"setting {name!r} must be {what}, got {value!r}")
        try:
            number = hint(value)
            finite = math.isfinite(number)
        except (TypeError, ValueError, OverflowError):
            # OverflowError: int(inf), or a float from an integer too large for one
            raise ConfigError(f"setting {name!r} must be {what}, got {value!r}") from None
        if not finite:
            # NaN passes every comparison check, and no setting means "unbounded" by infinity
            raise ConfigError(f"setting {name!r} must be a finite number, got {value!r}")
        if hint is int and isinstance(value, float) and value != number:
            # 2.5 is not silently cut to 2
            raise ConfigError(f"setting {name!r} must be {what}, got {value!r}")
        return number
    if hint is str:
        if isinstance(value, str):
            return value
        raise ConfigError(f"setting {name!r} must be a string, got {type(value).__name__}")
    if hint is Any or hint is object:
        return value
    if isinstance(hint, type) and isinstance(value, hint):
        return value
    raise ConfigError(f"setting {name!r}: cannot use {value!r} as {hint!r}")


_CHOICE_FIELDS: dict[type[Any], tuple[tuple[str, Any], ...]] = {}


def _choice_fields(cls: type[Any]) -> tuple[tuple[str, Any], ...]:
    """The fields of the dataclass ``cls`` whose values are enumerated (``Literal``), with their hints."""
    found = _CHOICE_FIELDS.get(cls)
    if found is None:
        hints = typing.get_type_hints(cls)
        fields = dataclasses.fields(cls)
        found = _CHOICE_FIELDS[cls] = tuple(
            (f.name, hints[f.name]) for f in fields if _is_choice(hints[f.name])
        )
    return found


def _is_choice(hint: Any) -> bool:
    if typing.get_origin(hint) is typing.Literal:
        return True
    return any(_is_choice(arg) for arg in typing.get_args(hint) if arg is not type(None))


def normalize_choices(settings: Any) -> None:
    """Check every enumerated (``Literal``) field of the frozen dataclass ``settings`` and store
    the canonical spelling of its value.

    A value is accepted in any case (``SASL_SSL`` for ``sasl_ssl``), as librdkafka accepts it;
    anything else raises :class:`~broker.errors.ConfigError` naming the field and its choices.
    Settings dataclasses call it first in ``__post_init__``, so settings made directly are held
    to what :func:`build_settings` accepts.
    """
    for name, hint in _choice_fields(type(settings)):
        value = getattr(settings, name)
        chosen = _coerce(name, value, hint)
        if chosen is not value:
            object.__setattr__(settings, name, chosen)


def build_settings(cls: type[T], values: Mapping[str, Any], *, backend: str) -> T:
    """An instance of the settings dataclass ``cls`` from ``values`` (strings are coerced).

    Keys may use ``-`` or ``_``. Unknown keys raise :class:`~broker.errors.UnknownSetting`.
    """
    if not dataclasses.is_dataclass(cls):
        raise TypeError(f"{cls!r} is not a dataclass")
    hints = typing.get_type_hints(cls)
    valid = {f.name: f for f in dataclasses.fields(cls) if f.init}
    normalized: dict[str, Any] = {}
    for key, value in values.items():
        name = key.replace("-", "_")
        if name in normalized:
            raise ConfigError(f"setting {key!r} is given twice")
        normalized[name] = value
    unknown = [k for k in normalized if k not in valid]
    if unknown:
        raise UnknownSetting(backend, unknown, list(valid))
    kwargs = {name: _coerce(name, value, hints[name]) for name, value in normalized.items()}
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:
        if isinstance(exc, ConfigError):
            raise
        raise ConfigError(f"invalid settings for backend {backend!r}: {exc}") from exc


def field_values(cls: type[Any], source: Any) -> dict[str, Any]:
    """``source``'s values of the fields of the dataclass ``cls``, by name and in field order.

    A backend's settings inherit the fields of its ``ConsumerOptions`` (they are the defaults of
    every consumer): ``field_values(ConsumerOptions, settings)`` reads them.
    """
    return {f.name: getattr(source, f.name) for f in dataclasses.fields(cls)}


def options_from(cls: type[T], source: Any, overrides: Mapping[str, Any] | None = None) -> T:
    """A new ``cls`` (a dataclass) from ``source``'s fields of the same names, with ``overrides`` applied.

    ``options_from(ConsumerOptions, settings, {"batch_size": 10})`` is the options of one consumer
    of a backend whose settings inherit its ``ConsumerOptions``: ``cls``'s own checks run on the
    result. ``overrides`` are used as they are (already typed; no coercion, unlike
    :func:`build_settings`), and a name that is no field of ``cls`` raises ``TypeError``.
    """
    return cls(**{**field_values(cls, source), **(overrides or {})})


def check_positive(unit: str = "", /, **values: float) -> None:
    """Raise :class:`~broker.errors.ConfigError` for the first of ``values`` that is not above 0.

    ``check_positive("seconds", close_timeout=t)`` says ``close_timeout must be > 0 seconds, got -1``.
    """
    suffix = f" {unit}" if unit else ""
    for name, value in values.items():
        if not value > 0:  # also NaN, which no comparison holds for
            raise ConfigError(f"{name} must be > 0{suffix}, got {value}")


def check_at_least(minimum: float, unit: str = "", /, **values: float) -> None:
    """Raise :class:`~broker.errors.ConfigError` for the first of ``values`` below ``minimum``.

    ``check_at_least(1, batch_size=n)`` says ``batch_size must be >= 1, got 0``;
    ``check_at_least(0, "seconds", linger=t)`` says ``linger must be >= 0 seconds, got -1``.
    """
    suffix = f" {unit}" if unit else ""
    for name, value in values.items():
        if not value >= minimum:  # also NaN, which no comparison holds for
            raise ConfigError(f"{name} must be >= {minimum}{suffix}, got {value}")


def describe(settings: Any) -> dict[str, Any]:
    """The settings as a dict safe to log: fields made with :func:`secret` read ``'***'``."""
    out: dict[str, Any] = {}
    for f in dataclasses.fields(settings):
        value = getattr(settings, f.name)
        if f.metadata.get("secret") and value is not None:
            value = "***"
        out[f.name] = value
    return out
