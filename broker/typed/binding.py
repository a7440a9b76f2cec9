"""Type bindings: an application type plus the format its values travel in.

A :class:`Binding` turns values of ``T`` into payload bytes and back. Make one with
:func:`binding` (a class: dataclass, pydantic model, msgspec ``Struct``, ``TypedDict``, a plain
JSON type such as ``dict`` or ``list[int]``; or a user :class:`~broker.codecs.Codec`), with
:func:`union` (a union of two to four types, with a discriminator for pydantic), or with an
explicit ``Binding[T](type_form)`` for any other type form, such as a pydantic discriminated
union written with ``Annotated`` (the checker takes ``T`` from the subscript)::

    orders = binding(Order)                                   # Binding[Order]
    shapes = union(Circle, Square)                            # Binding[Circle | Square]
    pets = Binding[Cat | Dog](Annotated[Cat | Dog, Field(discriminator="kind")])

Engines. A type that involves a pydantic model is validated by pydantic (``TypeAdapter``); one
that involves a msgspec ``Struct`` by msgspec. Any other type uses msgspec when it is installed
and the standard library otherwise (``json``, the ``msgpack`` package): then a dataclass is built
from the fields it declares (unknown fields dropped, missing ones an error, field types NOT
checked, nested dataclasses left as dicts) and a ``TypedDict`` is checked for its required keys
only. ``engine=`` forces one. Unknown fields are ignored by every engine. A missing library is
:class:`~broker.errors.MissingDependency` naming the extra (``msgspec``, ``pydantic``, ``msgpack``).
"""

from __future__ import annotations

import dataclasses
import importlib
import json
import sys
import typing
from collections.abc import Callable
from types import UnionType
from typing import Annotated, Any, Final, Generic, Literal, TypeVar, Union, get_args, get_origin, overload

from broker.codecs import BytesCodec, Codec, JsonCodec, MsgpackCodec, StrCodec
from broker.errors import ConfigError, DecodeError, EncodeError, MissingDependency
from broker.typed.formats import ALIASES, CONTENT_TYPE, CONTENT_TYPES, JSON, Format, media_type

__all__ = ["Binding", "Engine", "binding", "ensure_binding", "union"]

T = TypeVar("T")
A = TypeVar("A")
B = TypeVar("B")
C = TypeVar("C")
D = TypeVar("D")

#: Which library encodes and validates: see the module docstring.
Engine = Literal["msgspec", "pydantic", "stdlib"]

#: Content types of the codecs of :mod:`broker.codecs`.
_CODEC_CONTENT_TYPES: Final[dict[type[Any], str]] = {
    JsonCodec: "application/json",
    MsgpackCodec: "application/msgpack",
    StrCodec: "text/plain; charset=utf-8",
    BytesCodec: "application/octet-stream",
}

_Pair = tuple[Callable[[Any], bytes], Callable[[bytes], Any]]


def _require(module: str, extra: str) -> Any:
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        raise MissingDependency(extra, module, needed_by=f"this typed binding ({module})") from exc


def _members(target: Any) -> list[Any]:
    """The classes a type form is made of (through ``Annotated``, unions, ``Optional``)."""
    origin = get_origin(target)
    if origin is Annotated:
        return _members(get_args(target)[0])
    if origin is Union or isinstance(target, UnionType):
        return [m for arg in get_args(target) for m in _members(arg)]
    return [target]


def _subclass_of(target: Any, module: str, name: str) -> bool:
    loaded = sys.modules.get(module)
    base = getattr(loaded, name, None) if loaded is not None else None
    return base is not None and isinstance(target, type) and issubclass(target, base)


def _choose(target: Any, engine: Engine | None) -> Engine:
    members = _members(target)
    pydantic = any(_subclass_of(m, "pydantic", "BaseModel") for m in members)
    structs = any(_subclass_of(m, "msgspec", "Struct") for m in members)
    if pydantic and structs:
        raise ConfigError("one binding cannot mix pydantic models and msgspec Structs")
    if engine is not None:
        if engine not in ("msgspec", "pydantic", "stdlib"):
            raise ConfigError(f"engine must be 'msgspec', 'pydantic' or 'stdlib', got {engine!r}")
        if (pydantic and engine != "pydantic") or (structs and engine != "msgspec"):
            raise ConfigError(f"engine={engine!r} cannot handle {target!r}")
        return engine
    if pydantic:
        return "pydantic"
    if structs:
        return "msgspec"
    try:
        importlib.import_module("msgspec")
    except ImportError:
        return "stdlib"
    return "msgspec"


# -- engines: (encode, decode) per format ----------------------------------------------------
def _msgspec_pair(target: Any, fmt: str) -> _Pair:
    msgspec = _require("msgspec", "msgspec")
    kind = Any if target is object else target
    module = msgspec.json if fmt == JSON else msgspec.msgpack
    encoder = module.Encoder()
    decoder = module.Decoder(kind)
    return encoder.encode, decoder.decode


def _pydantic_pair(target: Any, fmt: str) -> _Pair:
    pydantic = _require("pydantic", "pydantic")
    adapter = pydantic.TypeAdapter(Any if target is object else target)
    if fmt == JSON:
        return adapter.dump_json, adapter.validate_json
    msgpack = _require("msgpack", "msgpack")
    packb, unpackb = msgpack.packb, msgpack.unpackb
    dump, validate = adapter.dump_python, adapter.validate_python

    def encode(value: Any) -> bytes:
        data: bytes = packb(dump(value, mode="json"), use_bin_type=True)
        return data

    def decode(data: bytes) -> Any:
        return validate(unpackb(data, raw=False))

    return encode, decode


def _stdlib_builder(target: Any) -> tuple[Callable[[Any], Any], Callable[[Any], Any]]:
    """(to plain data, from plain data) for the standard-library engine."""
    if dataclasses.is_dataclass(target) and isinstance(target, type):
        names = frozenset(f.name for f in dataclasses.fields(target) if f.init)
        cls: Any = target

        def build(obj: Any) -> Any:
            if type(obj) is not dict:
                raise TypeError(f"{cls.__name__} is decoded from an object, got {type(obj).__name__}")
            return cls(**{k: v for k, v in obj.items() if k in names})

        return dataclasses.asdict, build
    if typing.is_typeddict(target):
        required = frozenset(target.__required_keys__)
        name = target.__name__

        def check(obj: Any) -> Any:
            if type(obj) is not dict:
                raise TypeError(f"{name} is decoded from an object, got {type(obj).__name__}")
            missing = required - obj.keys()
            if missing:
                raise TypeError(f"{name} is missing required keys: {', '.join(sorted(missing))}")
            return obj

        return _same, check
    if target is object or target is Any:
        return _same, _same
    origin = get_origin(target) or target
    if origin in (dict, list, str, int, float, bool):

        def check_plain(obj: Any) -> Any:
            if not isinstance(obj, origin) or (origin is int and isinstance(obj, bool)):
                raise TypeError(f"expected {origin.__name__}, got {type(obj).__name__}")
            return obj

        return _same, check_plain
    raise ConfigError(
        f"the standard-library engine cannot decode {target!r}: install msgspec "
        "(pip install 'polybroker[msgspec]') or pydantic"
    )


def _same(value: Any) -> Any:
    return value


def _stdlib_pair(target: Any, fmt: str) -> _Pair:
    to_plain, from_plain = _stdlib_builder(target)
    if fmt == JSON:
        dumps, loads = json.dumps, json.loads

        def encode(value: Any) -> bytes:
            return dumps(to_plain(value), separators=(",", ":"), ensure_ascii=False).encode()

        def decode(data: bytes) -> Any:
            return from_plain(loads(data))

        return encode, decode
    msgpack = _require("msgpack", "msgpack")
    packb, unpackb = msgpack.packb, msgpack.unpackb

    def encode_msgpack(value: Any) -> bytes:
        data: bytes = packb(to_plain(value), use_bin_type=True)
        return data

    def decode_msgpack(data: bytes) -> Any:
        return from_plain(unpackb(data, raw=False))

    return encode_msgpack, decode_msgpack


_ENGINES: Final[dict[str, Callable[[Any, str], _Pair]]] = {
    "msgspec": _msgspec_pair,
    "pydantic": _pydantic_pair,
    "stdlib": _stdlib_pair,
}


class Binding(Generic[T]):
    """A type ``T`` bound to a payload format: encodes values to bytes, decodes bytes to ``T``.

    ``format`` (``"json"`` or ``"msgpack"``) is what is published, under the content type
    :attr:`content_type`; on receive, payloads in either format decode, picked by their content
    type (a missing one means ``format``). A binding over a ``codec`` (a
    :class:`~broker.codecs.Codec`) publishes and accepts only its ``content_type``. Usually made
    with :func:`binding` or :func:`union`; call the class directly, subscripted, for a type form
    those cannot express to the type checker: ``Binding[Cat | Dog](Annotated[...])``.
    """

    __slots__ = ("_decoders", "codec", "content_type", "decoder", "encoder", "engine", "format", "target")

    def __init__(
        self,
        target: Any = None,
        *,
        format: Format = "json",
        codec: Codec[T] | None = None,
        content_type: str | None = None,
        engine: Engine | None = None,
    ) -> None:
        self._decoders: dict[str, Callable[[bytes], T]] = {}
        #: The user codec, or None for a format binding.
        self.codec = codec
        if codec is not None:
            if target is not None:
                raise ConfigError("give a type or a codec=, not both")
            #: The type form values decode to (None for a codec binding).
            self.target: Any = None
            #: ``"json"``, ``"msgpack"``, or ``"codec"``.
            self.format: str = "codec"
            #: The engine (None for a codec binding).
            self.engine: Engine | None = None
            #: The content type published (and the only one accepted) for a codec binding.
            self.content_type: str = content_type or _CODEC_CONTENT_TYPES.get(
                type(codec), "application/octet-stream"
            )
            #: Values -> payload bytes, as called on publish (raw: errors not wrapped).
            self.encoder: Callable[[T], bytes] = codec.encode
            #: Payload bytes in the default format -> value, as called on receive (raw).
            self.decoder: Callable[[bytes], T] = codec.decode
            self._decoders[media_type(self.content_type)] = codec.decode
            return
        if target is None:
            raise ConfigError("a binding needs a type (or codec=)")
        if format not in CONTENT_TYPES:
            raise ConfigError(f"format must be 'json' or 'msgpack', got {format!r}")
        self.target = target
        self.format = format
        self.engine = _choose(target, engine)
        self.content_type = content_type or CONTENT_TYPES[format]
        self.encoder, self.decoder = _ENGINES[self.engine](target, format)
        self._decoders[format] = self.decoder

    def __repr__(self) -> str:
        what = repr(self.codec) if self.codec is not None else getattr(self.target, "__name__", self.target)
        return f"<Binding {what} as {self.content_type}>"

    def decoder_for(self, content_type: str) -> Callable[[bytes], T]:
        """The raw decoder of payloads of ``content_type``; ``DecodeError`` for one it cannot decode."""
        if self.codec is not None:
            found = self._decoders.get(media_type(content_type))
            if found is None:
                raise DecodeError(
                    f"content type {content_type!r} is not {self.content_type!r}, the only one "
                    f"{self!r} decodes",
                    content_type=content_type,
                )
            return found
        fmt = ALIASES.get(media_type(content_type))
        if fmt is None:
            raise DecodeError(
                f"unknown content type {content_type!r}: {self!r} decodes {', '.join(sorted(ALIASES))}",
                content_type=content_type,
            )
        found = self._decoders.get(fmt)
        if found is None:
            assert self.engine is not None
            found = self._decoders[fmt] = _ENGINES[self.engine](self.target, fmt)[1]
        return found

    def encode(self, value: T) -> bytes:
        """The payload for ``value`` in the binding's format (``EncodeError`` on failure)."""
        try:
            return self.encoder(value)
        except EncodeError:
            raise
        except Exception as exc:
            raise EncodeError(f"cannot encode {type(value).__name__} with {self!r}: {exc}") from exc

    def decode(self, data: bytes, content_type: str | None = None) -> T:
        """The value carried by ``data`` (in ``content_type``; None: the binding's format).

        Raises :class:`~broker.errors.DecodeError` when the content type is unknown or the
        payload does not decode or validate.
        """
        decode = self.decoder if content_type is None else self.decoder_for(content_type)
        try:
            return decode(data)
        except Exception as exc:
            raise self.failure(exc, None, content_type) from exc

    def decode_received(self, received: Any, data: bytes | None) -> T | None:
        """``data`` of ``received`` (a Message or Record) as ``T``: the decoder its ``content-type``
        attribute names (none: this binding's format); None for None (a tombstone). Raises
        :class:`~broker.errors.DecodeError` carrying ``received``."""
        if data is None:
            return None
        content_type = received.attributes.get(CONTENT_TYPE)
        if content_type is None or content_type == self.content_type:
            decode = self.decoder
        else:
            try:
                decode = self.decoder_for(content_type)
            except Exception as exc:
                raise self.failure(exc, received, content_type) from exc
        try:
            return decode(data)
        except Exception as exc:
            raise self.failure(exc, received, content_type) from exc

    def failure(self, exc: BaseException, received: Any, content_type: str | None) -> DecodeError:
        """The :class:`~broker.errors.DecodeError` for a decoder's ``exc`` (raise it ``from exc``)."""
        if isinstance(exc, DecodeError) and exc.received is received:
            exc.content_type = content_type
            return exc
        text = str(exc).strip().replace("\n", "; ")
        return DecodeError(
            f"cannot decode {self.content_type if content_type is None else content_type!r} payload "
            f"with {self!r}: {text}",
            received=received,
            content_type=content_type,
        )


@overload
def binding(
    target: type[T], *, format: Format = "json", content_type: str | None = None, engine: Engine | None = None
) -> Binding[T]: ...


@overload
def binding(*, codec: Codec[T], content_type: str | None = None) -> Binding[T]: ...


def binding(
    target: Any = None,
    *,
    format: Format = "json",
    codec: Any = None,
    content_type: str | None = None,
    engine: Engine | None = None,
) -> Binding[Any]:
    """A :class:`Binding` of ``target`` in ``format`` (``"json"`` or ``"msgpack"``), or of ``codec``.

    ``target`` is a class: a dataclass, a pydantic model, a msgspec ``Struct``, a ``TypedDict`` or
    a plain JSON type (``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``, ``object`` for
    any JSON value). ``content_type`` overrides the one published. For unions see :func:`union`.
    """
    if codec is not None:
        return Binding(codec=codec, content_type=content_type)
    return Binding(target, format=format, content_type=content_type, engine=engine)


@overload
def union(
    a: type[A], b: type[B], /, *, format: Format = ..., discriminator: str | None = ...
) -> Binding[A | B]: ...


@overload
def union(
    a: type[A], b: type[B], c: type[C], /, *, format: Format = ..., discriminator: str | None = ...
) -> Binding[A | B | C]: ...


@overload
def union(
    a: type[A],
    b: type[B],
    c: type[C],
    d: type[D],
    /,
    *,
    format: Format = ...,
    discriminator: str | None = ...,
) -> Binding[A | B | C | D]: ...


def union(*members: Any, format: Format = "json", discriminator: str | None = None) -> Binding[Any]:
    """A :class:`Binding` of the union of two to four classes: each payload decodes to one of them.

    With pydantic models, ``discriminator`` names the field that tells them apart (a pydantic
    discriminated union); without it pydantic tries each in turn. msgspec ``Struct`` members
    must be tagged (``class Circle(Struct, tag=True)``), which msgspec requires of a union of
    Structs; ``discriminator`` is for pydantic only. Dataclasses and ``TypedDict`` members need
    msgspec (with only the standard library a union cannot be told apart).
    """
    if not 2 <= len(members) <= 4:
        raise ConfigError(f"union takes 2 to 4 types, got {len(members)}")
    form: Any = Union[members]  # noqa: UP007 - built at run time from a tuple
    if discriminator is not None:
        pydantic = _require("pydantic", "pydantic")
        if not all(_subclass_of(m, "pydantic", "BaseModel") for m in members):
            raise ConfigError("discriminator= is for unions of pydantic models")
        form = Annotated[form, pydantic.Field(discriminator=discriminator)]
    return Binding(form, format=format)


def ensure_binding(target: Binding[T] | type[T]) -> Binding[T]:
    """``target`` if it is a :class:`Binding`, else :func:`binding` of it (JSON)."""
    if isinstance(target, Binding):
        return target
    return Binding(target)
