"""A publish recorder: what the code under test published, without consuming it.

:class:`PublishRecorder` hooks the portable publishing layer (send middleware,
:meth:`broker.driver.publishing.DriverPublisher.wrap_send`): each message a publisher sent is kept as a
:class:`Published` (topic, key, attributes, bytes) once the broker has it, and a publish that
failed is kept in :attr:`PublishRecorder.failed`. Nothing is monkeypatched and the backend is the
real one, so the same recorder works on ``inmem://`` and on a real broker.

Attach it to a backend (every publisher it hands out, before and after) with
:meth:`PublishRecorder.watch`, or to one publisher with :meth:`PublishRecorder.attach`; the
pytest plugin's ``polybroker_recorder`` fixture watches ``polybroker_backend``::

    await app.place_order(...)
    sent = polybroker_recorder.assert_published("orders", key="c-7")
    assert sent.value == Order(id=1, total=9.5)   # published through broker.typed.topic(...)
    assert sent.decoded(Order) == Order(id=1, total=9.5)   # any payload, with a type given

A message published through a typed topic handle (``broker.typed.topic``) carries its binding, so
:attr:`Published.value` decodes it with no type passed; for other payloads pass one to
:meth:`Published.decoded`.

A transactional publisher's messages are recorded when they are sent into the transaction.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from broker.driver.publishing import DriverPublisher, Send
from broker.message import OutboundMessage

__all__ = ["PublishRecorder", "Published"]

_CONTENT_TYPE = "content-type"  # broker.typed's attribute (imported lazily: it needs no SDK, but is big)


@dataclass(frozen=True, slots=True)
class Published:
    """One message a publisher sent: where, and exactly what the broker got."""

    topic: str
    data: bytes
    key: str | None = None
    attributes: Mapping[str, str] = field(default_factory=dict)
    #: The ``broker.typed`` binding the message was published with (a typed topic handle), else None.
    binding: Any = field(default=None, compare=False, repr=False)

    @property
    def text(self) -> str:
        """The payload as UTF-8 text."""
        return self.data.decode()

    @property
    def content_type(self) -> str | None:
        """The ``content-type`` attribute (set by ``broker.typed`` publishing), if any."""
        return self.attributes.get(_CONTENT_TYPE)

    def decoded(self, target: Any) -> Any:
        """The value the payload decodes to as ``target``: a type ``broker.typed`` can bind, or a binding.

        The payload's ``content-type`` picks the format (as a typed consumer would); raises
        ``broker.errors.DecodeError`` when it does not decode.
        """
        from broker.typed import Binding, binding

        bound = target if isinstance(target, Binding) else binding(target)
        content_type = self.content_type
        decoder = bound.decoder if content_type is None else bound.decoder_for(content_type)
        return decoder(self.data)

    @property
    def typed(self) -> bool:
        """True when the message was published through a typed topic handle (:attr:`value` works)."""
        return self.binding is not None

    @property
    def value(self) -> Any:
        """The value the application published, decoded with the typed topic handle's own binding.

        Raises ``broker.errors.NotSupported`` for a message published untyped (pass a type to
        :meth:`decoded` instead) and ``broker.errors.DecodeError`` when the payload does not decode.
        """
        if self.binding is None:
            from broker.errors import NotSupported

            raise NotSupported(
                f"the message to {self.topic!r} was not published through a typed topic handle "
                "(broker.typed.topic): pass the type to decoded()"
            )
        return self.decoded(self.binding)


class PublishRecorder:
    """Keeps every message sent through the publishers it is attached to, with assertion helpers."""

    def __init__(self) -> None:
        #: Every message the broker accepted, in the order the sends completed.
        self.published: list[Published] = []
        #: ``(message, error)`` for each message of a send that raised.
        self.failed: list[tuple[Published, BaseException]] = []
        self._attached: set[int] = set()

    def __repr__(self) -> str:
        return f"<PublishRecorder {len(self.published)} published, {len(self.failed)} failed>"

    def __len__(self) -> int:
        return len(self.published)

    def __iter__(self) -> Iterator[Published]:
        return iter(self.published)

    # -- attaching ------------------------------------------------------------------------------

    def attach(self, publisher: Any) -> None:
        """Record what ``publisher`` (a :class:`~broker.driver.publishing.DriverPublisher`) sends from
        now on."""
        if not isinstance(publisher, DriverPublisher):
            raise TypeError(
                f"{type(publisher).__name__} does not publish through broker.driver.DriverPublisher; "
                "the recorder cannot hook it"
            )
        if id(publisher) in self._attached:
            return
        self._attached.add(id(publisher))
        publisher.wrap_send(partial(self._record, publisher.bindings))

    def watch(self, backend: Any) -> None:
        """Record what every publisher of ``backend`` sends (those it handed out and will hand out)."""
        on_publisher = getattr(backend, "on_publisher", None)
        if on_publisher is None:
            raise TypeError(f"{type(backend).__name__} has no on_publisher hook; attach() its publishers")
        on_publisher(self.attach)

    async def _record(
        self, bindings: Mapping[str, Any], topic: str, messages: Sequence[OutboundMessage], send: Send
    ) -> None:
        try:
            await send(messages)
        except BaseException as exc:
            bound = bindings.get(topic)
            self.failed.extend((_published(topic, m, bound), exc) for m in messages)
            raise
        bound = bindings.get(topic)
        self.published.extend(_published(topic, m, bound) for m in messages)

    # -- reading --------------------------------------------------------------------------------

    def on(self, topic: str) -> list[Published]:
        """The messages published to ``topic``, in order."""
        return [p for p in self.published if p.topic == topic]

    def topics(self) -> list[str]:
        """The topics published to, in order of their first message."""
        return list(dict.fromkeys(p.topic for p in self.published))

    def values(self, topic: str, target: Any = None) -> list[Any]:
        """The decoded values of the messages published to ``topic``: as ``target`` (see
        :meth:`Published.decoded`), or without one as the typed topic handle published them
        (:attr:`Published.value`)."""
        if target is None:
            return [p.value for p in self.on(topic)]
        return [p.decoded(target) for p in self.on(topic)]

    def clear(self) -> None:
        """Forget everything recorded so far."""
        self.published.clear()
        self.failed.clear()

    # -- asserting ------------------------------------------------------------------------------

    def matching(
        self,
        topic: str,
        *,
        data: bytes | None = None,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        value: Any = None,
        target: Any = None,
    ) -> list[Published]:
        """The messages to ``topic`` with this payload, key, these attributes (a subset) and decoded value.

        ``value`` is compared with :meth:`Published.decoded` of ``target`` (default: the typed topic
        handle's binding for a message published through one, else ``type(value)``).
        """
        found = []
        for p in self.on(topic):
            if data is not None and p.data != data:
                continue
            if key is not None and p.key != key:
                continue
            if attributes is not None and any(p.attributes.get(k) != v for k, v in attributes.items()):
                continue
            if value is not None:
                try:
                    if target is not None:
                        got = p.decoded(target)
                    else:
                        got = p.value if p.binding is not None else p.decoded(type(value))
                    if got != value:
                        continue
                except Exception:
                    continue
            found.append(p)
        return found

    def assert_published(
        self,
        topic: str,
        *,
        data: bytes | None = None,
        key: str | None = None,
        attributes: Mapping[str, str] | None = None,
        value: Any = None,
        target: Any = None,
        count: int | None = None,
    ) -> Published:
        """Assert a message matching (see :meth:`matching`) went to ``topic`` (exactly ``count``, if given).

        Returns the last one matching; the failure lists what was published instead.
        """
        found = self.matching(topic, data=data, key=key, attributes=attributes, value=value, target=target)
        wanted = {
            k: v
            for k, v in (("data", data), ("key", key), ("attributes", attributes), ("value", value))
            if v is not None
        }
        if not found or (count is not None and len(found) != count):
            raise AssertionError(
                f"expected {count if count is not None else 'a'} message(s) on {topic!r} "
                f"with {wanted or 'anything'}, found {len(found)}; published: {self._summary()}"
            )
        return found[-1]

    def assert_nothing_published(self, topic: str | None = None) -> None:
        """Assert nothing was published (to ``topic``, or at all)."""
        found = self.published if topic is None else self.on(topic)
        if found:
            where = "" if topic is None else f" to {topic!r}"
            raise AssertionError(f"expected nothing published{where}, found {len(found)}: {self._summary()}")

    def _summary(self) -> str:
        if not self.published:
            return "nothing"
        shown = [f"{p.topic}: key={p.key!r} data={p.data[:60]!r}" for p in self.published[:10]]
        more = f" (+{len(self.published) - 10} more)" if len(self.published) > 10 else ""
        return "; ".join(shown) + more


def _published(topic: str, message: OutboundMessage, binding: Any = None) -> Published:
    return Published(topic, message.data, message.key, dict(message.attributes), binding)
