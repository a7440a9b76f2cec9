"""How a subscriber's parameters are bound: read once, from the annotations, at decoration time.

Each parameter is one of: the payload (the first parameter whose annotation is none of the
others; decoded by :mod:`broker.typed`), the :class:`~broker.Message`, its key
(``Annotated[str | None, Key]``), its attributes (``Annotated[Mapping[str, str], Attributes]``),
the app's shared :class:`~broker.Publisher` of the subscriber's backend, or a
:class:`logging.Logger`. A ``list[T]`` payload makes a batch subscriber (and ``list[Message]``
its messages). A ``Depends(...)`` parameter is left to FastDepends (see :mod:`broker.app.depends`).
Anything else is a :class:`~broker.errors.ConfigError` naming the parameter.
"""

from __future__ import annotations

import inspect
import logging
import types
import typing
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Annotated, Any, Literal, get_args, get_origin

from broker.app.depends import declares_dependency
from broker.app.markers import Attributes, Key
from broker.codecs import StrCodec
from broker.errors import ConfigError, DecodeError
from broker.interfaces import MiddlewarePublisher, Publisher
from broker.message import Message, Record
from broker.settle import handler_name
from broker.typed import Binding, cloudevents, tag_record
from broker.typed.binding import ensure_binding
from broker.typed.cloudevents import CloudEvent

__all__ = ["Kind", "Parameter", "Payload", "Signature", "read_signature"]

#: What a parameter receives.
Kind = Literal["payload", "message", "key", "attributes", "publisher", "logger"]

_STR = StrCodec()


@dataclass(frozen=True, slots=True)
class Parameter:
    """One parameter of a handler and what it receives."""

    name: str
    kind: Kind
    keyword: bool


class Payload:
    """How a payload parameter's value comes out of a message.

    ``bytes`` is the payload as delivered, ``str`` its UTF-8 text, a CloudEvent is bound for the
    subscriber's backend when the app starts, anything else through its :class:`broker.typed.Binding`.
    """

    __slots__ = ("binding", "event_data", "form", "prepare")

    def __init__(
        self,
        form: Literal["bytes", "str", "binding", "cloudevent"],
        binding: Binding[Any] | None,
        event_data: Binding[Any] | None = None,
    ) -> None:
        self.form = form
        self.binding = binding
        self.event_data = event_data
        resolve = getattr(binding, "resolve", None)
        #: The binding's step before decoding, awaited with the deliveries (a schema binding looks up
        #: their writer schemas off the event loop, so decoding never waits on the registry), or None.
        self.prepare: Callable[[list[Any]], Awaitable[None]] | None = (
            resolve if inspect.iscoroutinefunction(resolve) else None
        )

    def _binding_on(self, backend: Any) -> Binding[Any]:
        """The binding payloads decode with on ``backend`` (a CloudEvent's is named for its protocol)."""
        if self.form == "cloudevent":
            assert self.event_data is not None
            return cloudevents.binding(self.event_data, protocol=backend)
        assert self.binding is not None
        return self.binding

    def for_backend(self, backend: Any) -> Callable[[Message], Any]:
        """The decoding function of this payload on ``backend``: ``DecodeError`` (carrying the message)
        for a payload that does not decode."""
        if self.form == "bytes":
            return _raw
        if self.form == "str":
            return _text
        chosen = self._binding_on(backend)
        received = chosen.decode_received

        def decode(message: Message) -> Any:
            value = received(message, message.data)
            message._binding = chosen  # as tag_message does: message.decoded is this value
            message._decoded = value
            return value

        return decode

    def plain_decoder(self, backend: Any) -> tuple[Callable[[bytes], Any], str, Binding[Any]] | None:
        """``(decoder, content_type, binding)`` when this payload decodes on ``backend`` through a
        plain :class:`~broker.typed.Binding` (no schema, no CloudEvent): a message whose
        ``content-type`` attribute is missing or ``content_type`` decodes as ``decoder(data)``, so a
        pipeline can decode inline; None for any other payload (use :meth:`for_backend`)."""
        if self.form != "binding" or self.prepare is not None:
            return None
        chosen = self._binding_on(backend)
        if type(chosen).decode_received is not Binding.decode_received:
            return None
        return chosen.decoder, chosen.content_type, chosen

    def for_records(self, backend: Any) -> Callable[[Record], Any]:
        """The decoding function of this payload for records (a tombstone's value is None)."""
        if self.form == "bytes":
            return _record_value
        if self.form == "str":
            return _record_text
        chosen = self._binding_on(backend)

        def decode(record: Record) -> Any:
            return tag_record(record, chosen).decoded

        return decode


def _raw(message: Message) -> bytes:
    return message.data


def _record_value(record: Record) -> bytes | None:
    return record.value


def _record_text(record: Record) -> str | None:
    if record.value is None:
        return None
    try:
        return _STR.decode(record.value)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"the value is not UTF-8 text: {exc}", received=record) from exc


def _text(message: Message) -> str:
    try:
        return _STR.decode(message.data)
    except UnicodeDecodeError as exc:
        raise DecodeError(f"the payload is not UTF-8 text: {exc}", received=message) from exc


@dataclass(frozen=True, slots=True)
class Signature:
    """A handler's parameters as read from its annotations."""

    parameters: tuple[Parameter, ...]
    payload: Payload | None
    #: True for a batch subscriber (``list[T]`` payload or ``list[Message]``).
    batch: bool
    #: The binding of the return value (None: chosen from the value's type when published).
    returns: Binding[Any] | None
    #: True for ``async def`` handlers; plain functions run in a worker thread.
    is_async: bool
    #: True when a parameter is ``Depends(...)``: the handler is called through FastDepends.
    depends: bool = False


def _fail(handler: Callable[..., Any], name: str, why: str) -> ConfigError:
    return ConfigError(f"cannot bind parameter {name!r} of subscriber {handler_name(handler)}: {why}")


def _payload(handler: Callable[..., Any], name: str, annotation: Any) -> Payload:
    base: Any = annotation
    metadata: tuple[Any, ...] = ()
    if get_origin(annotation) is Annotated:
        base, *rest = get_args(annotation)
        metadata = tuple(rest)
    explicit = [m for m in metadata if isinstance(m, Binding)]
    if explicit:
        return Payload("binding", explicit[0])
    if base is bytes:
        return Payload("bytes", None)
    if base is str:
        return Payload("str", None)
    if base is CloudEvent or get_origin(base) is CloudEvent:
        args = get_args(base)
        try:
            data = ensure_binding(args[0] if args else object)
        except Exception as exc:
            raise _fail(handler, name, f"the CloudEvent data type cannot be bound: {exc}") from exc
        return Payload("cloudevent", None, data)
    try:
        return Payload("binding", ensure_binding(annotation))
    except Exception as exc:
        raise _fail(handler, name, f"broker.typed cannot bind {annotation!r}: {exc}") from exc


def _is_message(annotation: Any) -> bool:
    origin = get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, Message)


def _is_record(annotation: Any) -> bool:
    origin = get_origin(annotation) or annotation
    return isinstance(origin, type) and issubclass(origin, Record)


def _is_list(annotation: Any) -> bool:
    return get_origin(annotation) is list and len(get_args(annotation)) == 1


def _marker(annotation: Any) -> Kind | None:
    if get_origin(annotation) is not Annotated:
        return None
    for meta in get_args(annotation)[1:]:
        if meta is Key:
            return "key"
        if meta is Attributes:
            return "attributes"
    return None


def _returns(handler: Callable[..., Any], hints: dict[str, Any]) -> Binding[Any] | None:
    annotation = hints.get("return", None)
    if annotation is None or annotation is type(None) or annotation is Any:
        return None
    if isinstance(annotation, type) and annotation in (bytes, str):
        return None
    if get_origin(annotation) in (typing.Union, types.UnionType) or _is_list(annotation):
        return None  # an Optional or a batch's list: bound per value when published
    try:
        return ensure_binding(annotation)
    except Exception:
        return None


def read_signature(handler: Callable[..., Any], *, records: bool = False) -> Signature:
    """The :class:`Signature` of ``handler``; ``ConfigError`` naming a parameter that cannot be bound.

    With ``records`` (an ``@app.records`` handler) the delivery is a :class:`~broker.Record`:
    ``Record`` (or ``TypedRecord[T]``) binds it, and there are no batches.
    """
    if not callable(handler):
        raise ConfigError(f"a subscriber must be a function, got {handler!r}")
    is_async = inspect.iscoroutinefunction(handler)
    try:
        hints = typing.get_type_hints(handler, include_extras=True)
    except Exception as exc:
        raise ConfigError(
            f"cannot read the annotations of subscriber {handler_name(handler)}: {exc} (define the types it "
            "names at module level)"
        ) from exc
    parameters: list[Parameter] = []
    payload: Payload | None = None
    batch = False
    depends = False
    for param in inspect.signature(handler).parameters.values():
        name = param.name
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise _fail(handler, name, "*args and **kwargs cannot be bound")
        keyword = param.kind is param.KEYWORD_ONLY
        if declares_dependency(param, hints.get(name)):
            depends = True
            continue  # resolved by FastDepends on each call
        if name not in hints:
            raise _fail(handler, name, "it has no annotation (annotate the payload type, Message, ...)")
        annotation = hints[name]
        kind: Kind
        marked = _marker(annotation)
        if marked is not None:
            kind = marked
        elif records and _is_message(annotation):
            raise _fail(handler, name, "a records subscriber is given a Record, not a Message")
        elif records and _is_record(annotation):
            kind = "message"
        elif _is_message(annotation):
            kind = "message"
        elif _is_record(annotation):
            raise _fail(handler, name, "a subscriber is given a Message; records come to @app.records")
        elif records and _is_list(annotation):
            raise _fail(handler, name, "a records subscriber takes one record at a time, not a list")
        elif _is_list(annotation) and _is_message(get_args(annotation)[0]):
            kind, batch = "message", True
        elif annotation is Publisher or annotation is MiddlewarePublisher:
            kind = "publisher"
        elif annotation is logging.Logger:
            kind = "logger"
        elif payload is None:
            kind = "payload"
            target = annotation
            if _is_list(annotation):
                batch, target = True, get_args(annotation)[0]
            payload = _payload(handler, name, target)
        elif param.default is not param.empty:
            continue  # left to its default
        else:
            raise _fail(
                handler,
                name,
                f"{annotation!r} is not Message, Publisher, logging.Logger, Annotated[..., Key] or "
                "Annotated[..., Attributes], and the payload is parameter "
                f"{next(p.name for p in parameters if p.kind == 'payload')!r}",
            )
        parameters.append(Parameter(name, kind, keyword))
    if batch:
        for p in parameters:
            if p.kind in ("key", "attributes"):
                raise _fail(handler, p.name, "a batch subscriber has no single key or attributes")
            if p.kind == "message" and not _is_list(hints[p.name]):
                raise _fail(handler, p.name, "a batch subscriber takes list[Message], not one Message")
            if p.kind == "payload" and not _is_list(hints[p.name]):
                raise _fail(handler, p.name, "a batch subscriber's payload is a list (list[T])")
    if depends:
        # the resolver takes the bound values by name: a dependency may sit before them
        positional = [p.name for p in parameters if not p.keyword]
        for declared in inspect.signature(handler).parameters.values():
            if declared.name in positional and declared.kind is declared.POSITIONAL_ONLY:
                raise _fail(
                    handler, declared.name, "a handler with Depends() takes its parameters by name (no '/')"
                )
        parameters = [Parameter(p.name, p.kind, True) for p in parameters]
    return Signature(tuple(parameters), payload, batch, _returns(handler, hints), is_async, depends)
