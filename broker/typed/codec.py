"""One adapter from a type binding to the :class:`~broker.codecs.Codec` protocol.

Everything that takes a codec (the stream processor's edges, views and emitters, the Kafka
helpers' producer, any code calling ``codec.encode`` / ``codec.decode``) takes a type binding
through :func:`binding_codec`::

    from broker.typed import binding_codec

    orders = binding_codec(Order)                              # Codec[Order], JSON
    graph = GroupGraph("billing", input("orders", orders, on_order), persist(binding_codec(Total)))

The codec encodes with the binding (:class:`~broker.errors.EncodeError` on failure) and decodes
payloads in the binding's own format (:class:`~broker.errors.DecodeError` on failure, the
original exception chained). A codec sees bytes only, never a message's ``content-type``: a
JSON binding's codec decodes JSON, a MessagePack binding's MessagePack. A CloudEvents binding
(:func:`broker.typed.cloudevents.binding`) becomes a codec of whole events in structured mode
(``application/cloudevents+json``).
"""

from __future__ import annotations

from typing import Generic, TypeVar

from broker.codecs import Codec
from broker.driver.forwarding import Forwarded
from broker.typed.binding import Binding, ensure_binding

__all__ = ["BindingCodec", "binding_codec"]

T = TypeVar("T")


class BindingCodec(Generic[T]):
    """A :class:`~broker.codecs.Codec` of ``T`` over a :class:`~broker.typed.Binding` of ``T``."""

    __slots__ = ("_decode", "_encode", "binding")

    def __init__(self, binding: Binding[T]) -> None:
        #: The binding values are encoded and decoded with.
        self.binding = binding
        self._encode = binding.encode
        self._decode = binding.decode

    def __repr__(self) -> str:
        return f"<BindingCodec {self.binding!r}>"

    content_type: Forwarded[str] = Forwarded(
        "binding", "The content type of the payloads this codec writes (the binding's)."
    )

    def encode(self, value: T) -> bytes:
        """The payload for ``value`` (:class:`~broker.errors.EncodeError` when it cannot be encoded)."""
        return self._encode(value)

    def decode(self, data: bytes) -> T:
        """The value carried by ``data`` in the binding's format (:class:`~broker.errors.DecodeError`)."""
        return self._decode(data)


def binding_codec(binding: Binding[T] | type[T]) -> Codec[T]:
    """``binding`` (a :class:`~broker.typed.Binding`, or a class meaning ``typed.binding(cls)``) as a
    :class:`~broker.codecs.Codec`, for everything that takes a codec."""
    return BindingCodec(ensure_binding(binding))
