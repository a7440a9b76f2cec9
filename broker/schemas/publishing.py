"""Publishing registry-framed values (and, on Kafka, keys) through the portable publisher.

:class:`SchemaTopic` encodes values with a :class:`~broker.schemas.SchemaBinding` and publishes
:class:`~broker.OutboundMessage` objects through the untyped topic handle, as
:class:`broker.typed.TypedTopic` does, plus what a framed payload needs: the topic name for the
subject strategy, the schema-id header when the binding writes the id there, and a framed key.
The first value of each topic is encoded in a worker thread (the registry is asked once); later
ones are encoded in place, from the cached id.

Keys. The portable key is a ``str``. A registry-framed key is binary, so it is a Kafka option: the
Kafka backend sends the surrogate-escaped text of the bytes back as those bytes. Other backends
refuse a key binding with :class:`~broker.errors.NotSupported`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any, Generic, TypeVar

from broker.driver.forwarding import Forwarded
from broker.errors import ConfigError, NotSupported
from broker.interfaces import Publisher
from broker.message import OutboundMessage
from broker.schemas.binding import SchemaBinding
from broker.schemas.framing import guid_from_header, guid_header, text_of_bytes
from broker.typed.formats import CONTENT_TYPE

__all__ = ["SchemaTopic", "binary_headers"]

T = TypeVar("T")
K = TypeVar("K")


def binary_headers(publisher: Any) -> bool:
    """Whether ``publisher`` sends surrogate-escaped attribute text and keys back as raw bytes (Kafka)."""
    module = type(publisher).__module__
    return ".kafka." in f".{module}." or module.startswith("backends.kafka")


class SchemaTopic(Generic[T]):
    """A publishing handle for one topic whose values (and Kafka keys) are registry-framed."""

    __slots__ = ("_attributes", "_binary", "binding", "key_binding", "topic")

    def __init__(
        self,
        publisher: Publisher,
        name: str,
        binding: SchemaBinding[T],
        *,
        key: SchemaBinding[Any] | None = None,
    ) -> None:
        if not isinstance(binding, SchemaBinding):
            raise ConfigError(f"schemas.topic needs a SchemaBinding, got {type(binding).__name__}")
        self._binary = binary_headers(publisher)
        if key is not None:
            if not isinstance(key, SchemaBinding) or key.field != "key":
                raise ConfigError("key= takes a SchemaBinding made with field='key'")
            if not self._binary:
                raise NotSupported(
                    f"registry-framed keys are a Kafka option: {type(publisher).__name__} takes str keys only"
                )
        #: The untyped topic handle underneath.
        self.topic = publisher.topic(name)
        #: The value binding.
        self.binding = binding
        #: The key binding (Kafka), or None for plain ``str`` keys.
        self.key_binding = key
        self._attributes: Mapping[str, str] = {CONTENT_TYPE: binding.content_type}

    def __repr__(self) -> str:
        return f"<SchemaTopic {self.topic.name!r} {self.binding!r}>"

    name: Forwarded[str] = Forwarded("topic", "The topic's name.")

    def _header_text(self, raw: bytes) -> str:
        if self._binary:
            return text_of_bytes(raw)
        guid = guid_from_header(text_of_bytes(raw))
        return guid_header(guid or "", binary=False)

    def message(
        self, value: T, *, key: Any = None, attributes: Mapping[str, str] | None = None
    ) -> OutboundMessage:
        """The :class:`~broker.OutboundMessage` :meth:`publish` sends (encoded here, in this thread)."""
        name = self.topic.name
        binding = self.binding
        headers: dict[str, bytes] | None = {} if binding.id_in == "header" else None
        data = binding.encode_for(value, name, headers)
        key_text: str | None
        if self.key_binding is not None and key is not None:
            key_binding = self.key_binding
            if key_binding.id_in == "header":
                headers = {} if headers is None else headers
            key_text = text_of_bytes(key_binding.encode_for(key, name, headers))
        else:
            if key is not None and not isinstance(key, str):
                raise ConfigError(
                    f"a key is a str (or give schemas.topic a key= binding), got {type(key).__name__}"
                )
            key_text = key
        if not headers and not attributes:
            return OutboundMessage(data, key_text, self._attributes)
        merged = dict(self._attributes)
        if headers:
            for header, raw in headers.items():
                merged[header] = self._header_text(raw)
        if attributes:
            merged.update(attributes)
        return OutboundMessage(data, key_text, merged)

    async def _first(self, value: T, key: Any, attributes: Mapping[str, str] | None) -> OutboundMessage:
        """:meth:`message` in a worker thread when the topic's schema ids are not cached yet."""
        binding, key_binding, name = self.binding, self.key_binding, self.topic.name
        cold = not binding.is_warm(name) or (
            key_binding is not None and key is not None and not key_binding.is_warm(name)
        )
        if cold:
            return await asyncio.to_thread(self.message, value, key=key, attributes=attributes)
        return self.message(value, key=key, attributes=attributes)

    async def publish(
        self,
        value: T,
        *,
        key: Any = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``value`` (``key``: a ``str``, or a value of the key binding on Kafka)."""
        await self.topic.publish(await self._first(value, key, attributes), timeout=timeout)

    async def batch_publish(
        self,
        *values: T,
        keys: Sequence[Any] | None = None,
        attributes: Mapping[str, str] | None = None,
        timeout: float | None = None,
    ) -> None:
        """Encode and publish ``values`` in order, in one batch (``keys``: one per value)."""
        if not values:
            return
        if keys is not None and len(keys) != len(values):
            raise ConfigError(f"batch_publish got {len(values)} values but {len(keys)} keys")
        first = await self._first(values[0], keys[0] if keys is not None else None, attributes)
        binding = self.binding
        if keys is None and not attributes and binding.id_in == "payload":
            encode, name, shared = binding.encode_for, self.topic.name, self._attributes
            rest = [OutboundMessage(encode(v, name), None, shared) for v in values[1:]]
        elif keys is None:
            message = self.message
            rest = [message(v, attributes=attributes) for v in values[1:]]
        else:
            message = self.message
            rest = [
                message(v, key=k, attributes=attributes) for v, k in zip(values[1:], keys[1:], strict=True)
            ]
        await self.topic.batch_publish(first, *rest, timeout=timeout)
