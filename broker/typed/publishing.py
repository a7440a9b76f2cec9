"""Typed publishing: a topic handle that takes the application's values.

:class:`TypedTopic` encodes each value with its :class:`Binding` and publishes an
:class:`~broker.OutboundMessage` through the untyped topic handle, so validation, interceptors,
telemetry and the backend are exactly those of untyped publishing. Every message carries the
binding's content type in the ``content-type`` attribute; attributes the caller passes are
added, and a ``content-type`` among them is kept as given.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import ClassVar, Generic, TypeVar

from broker.driver.forwarding import Forwarded
from broker.errors import ConfigError, EncodeError
from broker.interfaces import Topic
from broker.message import OutboundMessage
from broker.typed.binding import Binding
from broker.typed.formats import CONTENT_TYPE

__all__ = ["TypedTopic"]

T = TypeVar("T")


class TypedTopic(Generic[T]):
    """A publishing handle for one topic whose messages carry values of ``T``."""

    __slots__ = ("_attributes", "binding", "topic")

    #: Whether every message is the encoded value with the binding's content type (and the
    #: caller's key and attributes), so that :meth:`batch_publish` may build them in one pass.
    _plain: ClassVar[bool] = True

    def __init__(self, topic: Topic, binding: Binding[T]) -> None:
        #: The untyped topic handle underneath.
        self.topic = topic
        #: The binding values are encoded with.
        self.binding = binding
        self._attributes: Mapping[str, str] = {CONTENT_TYPE: binding.content_type}

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.topic.name!r} {self.binding!r}>"

    name: Forwarded[str] = Forwarded("topic", "The topic's name.")

    def message(
        self, value: T, *, key: str | None = None, attributes: Mapping[str, str] | None = None
    ) -> OutboundMessage:
        """The :class:`~broker.OutboundMessage` that :meth:`publish` sends for ``value``.

        Raises :class:`~broker.errors.EncodeError` when ``value`` cannot be encoded.
        """
        try:
            data = self.binding.encoder(value)
        except EncodeError:
            raise
        except Exception as exc:
            raise EncodeError(f"cannot encode {type(value).__name__} with {self.binding!r}: {exc}") from exc
        if attributes:
            return OutboundMessage(data, key, {**self._attributes, **attributes})
        return OutboundMessage(data, key, self._attributes)

    async def publish(
        self,
        value: T,
        *,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``value``; returns once the broker has it."""
        await self.topic.publish(self.message(value, key=key, attributes=attributes), timeout=timeout)

    async def batch_publish(
        self,
        *values: T,
        keys: Sequence[str | None] | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``values`` in order, in one batch; returns once the broker has all.

        ``keys`` gives one key per value; ``attributes`` are added to every message.
        """
        messages = self.messages(*values, keys=keys, attributes=attributes)
        await self.topic.batch_publish(*messages, timeout=timeout)

    def messages(
        self,
        *values: T,
        keys: Sequence[str | None] | None = None,
        attributes: Mapping[str, str] | None = None,
    ) -> list[OutboundMessage]:
        """The messages :meth:`batch_publish` sends for ``values`` (one :meth:`message` each).

        Raises :class:`~broker.errors.ConfigError` when ``keys`` does not give one key per value.
        """
        if keys is not None and len(keys) != len(values):
            raise ConfigError(f"batch_publish got {len(values)} values but {len(keys)} keys")
        if keys is None and not attributes and self._plain:
            # The common case as an application would write it by hand: one encoder call and one
            # OutboundMessage per value, sharing the content-type mapping.
            encode, shared = self.binding.encoder, self._attributes
            try:
                return [OutboundMessage(encode(v), None, shared) for v in values]
            except Exception:
                pass  # the value that does not encode fails below, with its EncodeError
        message = self.message
        if keys is None:
            return [message(v, attributes=attributes) for v in values]
        return [message(v, key=k, attributes=attributes) for v, k in zip(values, keys, strict=True)]
