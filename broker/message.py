"""The three data types that cross every layer: OutboundMessage, Message and Record.

``Message`` and ``Record`` carry no broker logic of their own: a backend attaches an
:class:`Acker` (per-message settlement) or a :class:`Committer` (offset commits), and the
methods here enforce the portable rules (acking twice is a no-op, ack after nack raises, ...)
before delegating. Times are POSIX seconds (``time.time()``), ``None`` where the broker
does not say.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Final, Protocol, TypeGuard, runtime_checkable

from broker.driver.clock import clock
from broker.errors import AckError, NotSupported

__all__ = ["Message", "OutboundMessage", "Record", "RecordBatch"]

#: A shared, read-only empty attribute mapping (avoids one dict per message).
EMPTY_ATTRIBUTES: Final[Mapping[str, str]] = {}

_PENDING: Final = 0
_ACKED: Final = 1
_NACKED: Final = 2
_DEAD: Final = 3
_STATE_NAMES: Final = ("pending", "acked", "nacked", "dead-lettered")

#: ``decoded`` of a typed message or record not read yet (a typed consumer sets it with the binding).
UNDECODED: Final[Any] = object()


def _untyped(what: str) -> NotSupported:
    return NotSupported(
        f"{what} was handed out by an untyped consumer: it has no 'decoded' (receive it through "
        "broker.typed, e.g. typed.messages(backend.messages(...), Order))"
    )


@dataclass(slots=True)
class OutboundMessage:
    """A message to publish.

    ``key`` orders messages (same key, same partition or ordering key) and is not an identity;
    ``attributes`` are portable ``str -> str`` metadata (headers, properties).
    """

    data: bytes
    key: str | None = None
    attributes: Mapping[str, str] = field(default_factory=lambda: EMPTY_ATTRIBUTES)


class Acker(Protocol):
    """What a backend attaches to a :class:`Message` to settle it with the broker."""

    async def ack(self, message: Message) -> None:
        """Tell the broker the message was handled; it will not be delivered again."""

    async def nack(self, message: Message, delay: float | None) -> None:
        """Ask the broker to redeliver the message, after ``delay`` seconds where it can."""

    async def in_progress(self, message: Message) -> None:
        """Extend the message's ack deadline (lock, lease) while it is still being handled."""


@runtime_checkable
class DeadLetterAcker(Acker, Protocol):
    """An :class:`Acker` that can dead-letter (every backend's does; see :func:`can_dead_letter`)."""

    async def dead_letter(self, message: Message, reason: str | None) -> None:
        """Stop redelivering the message: to the dead-letter queue where one is configured, else drop it."""


@runtime_checkable
class BulkAcker(Acker, Protocol):
    """An :class:`Acker` with a bulk path (see :func:`acks_in_bulk`)."""

    async def ack_many(self, messages: Sequence[Message]) -> list[Message]:
        """Ack the pending messages among ``messages`` that are this acker's; return the others, in order."""


@runtime_checkable
class NativePropertiesAcker(Acker, Protocol):
    """An :class:`Acker` of a broker whose message properties are typed (Service Bus application
    properties, RabbitMQ headers): it gives a received message's properties with their types."""

    def native_properties(self, message: Message) -> Mapping[str, Any]:
        """``message``'s application properties as the broker typed them (beside the portable
        ``str -> str`` attributes); properties the backend uses for itself are left out."""
        ...


_CONFORMS: dict[tuple[type, type], bool] = {}


def _is(acker: object, protocol: type) -> bool:
    # isinstance() of a runtime protocol walks every member (microseconds); ackers are few
    # classes whose methods are class attributes, so the answer is kept per class.
    kind = (type(acker), protocol)
    known = _CONFORMS.get(kind)
    if known is None:
        known = _CONFORMS[kind] = isinstance(acker, protocol)
    return known


def can_dead_letter(acker: object) -> TypeGuard[DeadLetterAcker]:
    """True when ``acker`` implements :class:`DeadLetterAcker`."""
    return _is(acker, DeadLetterAcker)


def has_native_properties(acker: object) -> TypeGuard[NativePropertiesAcker]:
    """True when ``acker`` implements :class:`NativePropertiesAcker`."""
    return _is(acker, NativePropertiesAcker)


def acks_in_bulk(acker: object) -> TypeGuard[BulkAcker]:
    """True when ``acker`` implements :class:`BulkAcker`."""
    return _is(acker, BulkAcker)


class _DetachedAcker:
    """The acker of a Message built by hand: every settlement is refused."""

    async def ack(self, message: Message) -> None:
        raise AckError("this Message was not received from a broker; there is nothing to ack")

    async def nack(self, message: Message, delay: float | None) -> None:
        raise AckError("this Message was not received from a broker; there is nothing to nack")

    async def in_progress(self, message: Message) -> None:
        raise AckError("this Message was not received from a broker")


_DETACHED: Final = _DetachedAcker()


def own_acker(message: Message) -> Any:
    """The acker the backend attached to ``message``, beneath any wrapper in front of it.

    A wrapper (``broker.telemetry``'s) keeps the backend's acker as ``wrapped``; a backend that
    asks "is this message mine?" (lock renewal, shutdown) compares this, not ``message.acker``.
    """
    acker = message.acker
    return getattr(acker, "wrapped", acker)


@dataclass(slots=True)
class Message:
    """One delivery from a broker with per-message acknowledgement.

    ``delivery_attempt`` is 1 on the first delivery where the broker counts deliveries.
    ``raw`` is the SDK's own object, an escape hatch for broker-specific features.
    Acking twice is a no-op; acking after a nack (or nacking after an ack) raises
    :class:`~broker.errors.AckError`.
    """

    id: str
    data: bytes
    key: str | None = None
    attributes: Mapping[str, str] = field(default_factory=lambda: EMPTY_ATTRIBUTES)
    publish_time: float | None = None
    ingestion_time: float | None = None
    delivery_attempt: int | None = None
    raw: Any = field(default=None, repr=False, compare=False)
    acker: Acker = field(default=_DETACHED, repr=False, compare=False)
    _state: int = field(default=_PENDING, repr=False, compare=False)
    # The ack deadline as the client sees it (start_ack_deadline): seconds, and the monotonic time
    # it passes; 0.0 where the backend names none (the broker extends leases on its own).
    _ack_deadline: float = field(default=0.0, repr=False, compare=False)
    _due: float = field(default=0.0, repr=False, compare=False)
    # Set by a typed consumer (broker.typed) only, never by __init__: untyped messages pay nothing.
    _binding: Any = field(init=False, repr=False, compare=False)
    _decoded: Any = field(init=False, repr=False, compare=False)

    @property
    def state(self) -> str:
        """``"pending"``, ``"acked"``, ``"nacked"`` or ``"dead-lettered"``."""
        return _STATE_NAMES[self._state]

    @property
    def decoded(self) -> Any:
        """The payload as the application's type, decoded on first read and kept.

        Only for a message a typed consumer (:mod:`broker.typed`) handed out; its binding picks
        the decoder by the message's content type. Raises :class:`~broker.errors.DecodeError` when
        the payload does not decode, and :class:`~broker.errors.NotSupported` for a message of an
        untyped consumer.
        """
        try:
            value = self._decoded
        except AttributeError:
            raise _untyped(f"message {self.id!r}") from None
        if value is UNDECODED:
            value = self._decoded = self._binding.decode_received(self, self.data)
        return value

    @property
    def settled(self) -> bool:
        """True once the message was acked, nacked or dead-lettered."""
        return self._state != _PENDING

    async def ack(self) -> None:
        """Acknowledge successful handling; the broker will not deliver it again.

        An ack after the message's ack deadline (counted from its delivery or its last
        :meth:`in_progress`, on the client's clock) is still sent, then raises
        :class:`~broker.errors.AckError` naming the deadline: the broker may have redelivered the
        message meanwhile. The message stays acked (acking again is a no-op).
        """
        state = self._state
        if state == _ACKED:
            return
        if state != _PENDING:
            raise AckError(f"cannot ack message {self.id!r}: it was already {_STATE_NAMES[state]}")
        self._state = _ACKED
        due = self._due
        # Late by when the ack is sent, not when the broker answers; no clock read without a deadline.
        sent = clock.monotonic() if due else 0.0
        late = due and sent > due
        try:
            await self.acker.ack(self)
        except BaseException as exc:
            self._state = _PENDING
            if late and isinstance(exc, AckError):
                raise late_ack_error([self], sent, refused=exc) from exc
            raise
        if late:
            raise late_ack_error([self], sent)

    async def nack(self, delay: float | None = None) -> None:
        """Report failed handling: the broker redelivers it (after ``delay`` seconds where it can)."""
        if delay is not None and delay < 0:
            raise ValueError(f"nack delay must be >= 0, got {delay!r}")
        state = self._state
        if state == _NACKED:
            return
        if state != _PENDING:
            raise AckError(f"cannot nack message {self.id!r}: it was already {_STATE_NAMES[state]}")
        self._state = _NACKED
        try:
            await self.acker.nack(self, delay)
        except BaseException:
            self._state = _PENDING
            raise

    async def in_progress(self) -> None:
        """Extend the ack deadline: handling goes on, do not redeliver yet."""
        if self._state != _PENDING:
            raise AckError(f"message {self.id!r} is already {_STATE_NAMES[self._state]}")
        await self.acker.in_progress(self)
        if self._due:
            self._due = clock.monotonic() + self._ack_deadline

    async def dead_letter(self, reason: str | None = None) -> None:
        """Stop redelivering a poison message (dead-letter queue where configured, else drop it).

        Raises :class:`~broker.errors.NotSupported` on backends that cannot do this.
        """
        if self._state == _DEAD:
            return
        if self._state != _PENDING:
            raise AckError(f"message {self.id!r} is already {_STATE_NAMES[self._state]}")
        acker = self.acker
        if not can_dead_letter(acker):
            raise NotSupported(f"{type(acker).__name__} cannot dead-letter messages")
        self._state = _DEAD
        try:
            await acker.dead_letter(self, reason)
        except BaseException:
            self._state = _PENDING
            raise


class LazyMessage(Message):
    """A Message whose fields other than ``data`` are decoded from ``raw`` when first read.

    For backends whose per-message decoding costs more than the rest of their consumer: a
    subclass maps field names to decoders in ``decoders`` (``{"key": lambda raw: ...}``) and
    builds messages with ``Cls(data, raw, acker, ingestion_time)``; a field is decoded on its
    first read and stored. Values are the same as if they had been decoded up front.
    """

    __slots__ = ()

    #: Field name -> function of ``raw`` giving its value (fields missing here must be set).
    decoders: ClassVar[Mapping[str, Callable[[Any], Any]]] = {}

    def __init__(self, data: bytes, raw: Any, acker: Acker, ingestion_time: float | None = None) -> None:
        self.data = data
        self.raw = raw
        self.acker = acker
        self.ingestion_time = ingestion_time
        self._state = _PENDING
        self._ack_deadline = self._due = 0.0

    @classmethod
    def many(
        cls,
        raws: Iterable[Any],
        data_of: Callable[[Any], bytes | None],
        acker: Acker,
        ingestion_time: float | None,
    ) -> list[Message]:
        """One message per item of ``raws`` (``data_of(raw) or b""`` as data): the same as calling
        the class for each, without a Python call per message (a consumer's hot path)."""
        new = object.__new__
        out: list[Message] = []
        append = out.append
        for raw in raws:
            message = new(cls)
            message.data = data_of(raw) or b""
            message.raw = raw
            message.acker = acker
            message.ingestion_time = ingestion_time
            message._state = _PENDING
            message._ack_deadline = message._due = 0.0
            append(message)
        return out

    def __getattr__(self, name: str) -> Any:
        # Reached only for a slot not set yet: decode it now.
        decode = type(self).decoders.get(name)
        if decode is None:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}")
        value = decode(self.raw)
        object.__setattr__(self, name, value)
        return value


def start_ack_deadline(
    messages: Iterable[Message], seconds: float | None, since: float | None = None
) -> None:
    """For a backend: the ack deadline of ``messages`` is ``seconds``, running from ``since``.

    ``since`` is a :data:`broker.driver.clock.clock` monotonic time (default: now), when the broker
    started counting (the delivery, or the client's own timer). From then on the portable layer
    knows when the deadline passes on the client's clock: :meth:`Message.in_progress` restarts it,
    and an ack after it raises :class:`~broker.errors.AckError` once sent (:func:`late_ack_error`).
    ``None`` (the broker or its SDK extends the lease on its own) leaves the messages without one.
    """
    if not seconds:
        return
    due = (clock.monotonic() if since is None else since) + seconds
    for message in messages:
        message._ack_deadline = seconds
        message._due = due


def late_ack_error(
    messages: Sequence[Message], now: float | None = None, refused: BaseException | None = None
) -> AckError:
    """The error of acks sent (at ``now``, default: now) after the messages' ack deadline passed;
    the first one is named. ``refused``: the broker's answer when it refused the ack."""
    first = messages[0]
    late = (clock.monotonic() if now is None else now) - first._due
    more = f" (and {len(messages) - 1} more acked late)" if len(messages) > 1 else ""
    outcome = (
        f"the broker refused the ack ({refused}) and redelivers the message"
        if refused is not None
        else "the ack was sent, but the broker may have redelivered the message already"
    )
    return AckError(
        f"message {first.id!r} was acked {late:.3g}s after its ack deadline of {first._ack_deadline:g}s "
        f"(from its delivery or last in_progress()) passed by the client's clock{more}: {outcome} "
        "(extend the deadline with in_progress() while handling takes longer)"
    )


def late_acks(messages: Iterable[Message], now: float) -> list[Message]:
    """The acked messages among ``messages`` whose ack deadline had passed at ``now`` (monotonic)."""
    return [m for m in messages if m._due and m._state == _ACKED and now > m._due]


def claim_ack(message: Message) -> bool:
    """For a bulk acker (``ack_many``): mark a pending ``message`` acked.

    True if it was pending (the acker must now settle it with the broker); False if it was
    already settled, so there is nothing to send.
    """
    if message._state == _PENDING:
        message._state = _ACKED
        return True
    return False


def claim_acks(messages: Iterable[Message], acker: object) -> tuple[list[Message], list[Message]]:
    """For a bulk acker: :func:`claim_ack` every message of ``acker`` among ``messages`` at once.

    Returns ``(claimed, others)``: the messages of ``acker`` that were pending (now marked acked;
    the acker must settle them with the broker) and the messages of other ackers, in order.
    Messages of ``acker`` that were already settled are in neither list.
    """
    claimed: list[Message] = []
    others: list[Message] = []
    for message in messages:
        if message.acker is acker:
            if message._state == _PENDING:
                message._state = _ACKED
                claimed.append(message)
        else:
            others.append(message)
    return claimed, others


def release_claim(message: Message) -> None:
    """Undo :func:`claim_ack` after the broker refused the ack: the message is pending again."""
    if message._state == _ACKED:
        message._state = _PENDING


class Committer(Protocol):
    """What a backend attaches to a :class:`Record` to commit offsets."""

    async def commit(self, record: Record) -> None:
        """Commit ``record.offset + 1`` for the record's partition (acks every lower offset)."""


class _DetachedCommitter:
    async def commit(self, record: Record) -> None:
        raise AckError("this Record was not read from a broker; there is nothing to commit")


_DETACHED_COMMITTER: Final = _DetachedCommitter()


@dataclass(slots=True)
class Record:
    """One entry of a partitioned log.

    ``ack()`` commits this offset and, implicitly, every lower offset of the same partition.
    ``value`` is ``None`` for a tombstone (a deletion on a compacted topic).
    """

    topic: str
    partition: int
    offset: int
    value: bytes | None
    key: str | None = None
    attributes: Mapping[str, str] = field(default_factory=lambda: EMPTY_ATTRIBUTES)
    publish_time: float | None = None
    ingestion_time: float | None = None
    raw: Any = field(default=None, repr=False, compare=False)
    committer: Committer = field(default=_DETACHED_COMMITTER, repr=False, compare=False)
    # Set by a typed consumer (broker.typed) only, never by __init__: untyped records pay nothing.
    _binding: Any = field(init=False, repr=False, compare=False)
    _decoded: Any = field(init=False, repr=False, compare=False)

    @property
    def decoded(self) -> Any:
        """The value as the application's type (None for a tombstone), decoded on first read and kept.

        Only for a record a typed consumer (:mod:`broker.typed`) handed out; raises
        :class:`~broker.errors.DecodeError` when the value does not decode, and
        :class:`~broker.errors.NotSupported` for a record of an untyped consumer.
        """
        try:
            value = self._decoded
        except AttributeError:
            raise _untyped(f"record {self.topic}/{self.partition}@{self.offset}") from None
        if value is UNDECODED:
            value = self._decoded = self._binding.decode_received(self, self.value)
        return value

    async def ack(self) -> None:
        """Commit this record's offset (and so every lower offset of its partition)."""
        await self.committer.commit(self)


class RecordBatch(list[Record]):
    """A list of records that may know, per partition, its highest record as read.

    A backend can build its batches as a ``RecordBatch`` that knows (or works out cheaply from
    what it read) each partition's highest record, so :func:`~broker.commit_highest_offsets`
    does not walk the records. Any change to the list forgets that knowledge (the next commit
    walks the records); a batch built by hand knows nothing and behaves as a plain list.
    """

    __slots__ = ("_highest", "_known")

    def __init__(self, records: Iterable[Record] = (), highest: dict[tuple[str, int], Record] | None = None):
        super().__init__(records)
        self._highest = highest
        self._known = highest is not None

    def highest(self) -> dict[tuple[str, int], Record] | None:
        """``(topic, partition) -> record`` of that partition's highest offset; None when unknown."""
        return self._highest if self._known else None

    def _forget(self) -> None:
        self._known = False
        self._highest = None

    def __setitem__(self, index: Any, value: Any) -> None:
        self._forget()
        super().__setitem__(index, value)

    def __delitem__(self, index: Any) -> None:
        self._forget()
        super().__delitem__(index)

    def __iadd__(self, other: Iterable[Record]) -> RecordBatch:  # type: ignore[override,misc]
        self._forget()
        return super().__iadd__(other)

    def __imul__(self, count: Any) -> RecordBatch:  # type: ignore[misc]
        self._forget()
        return super().__imul__(count)

    def append(self, record: Record) -> None:
        """Append ``record`` (the batch forgets its highest offsets)."""
        self._forget()
        super().append(record)

    def extend(self, records: Iterable[Record]) -> None:
        """Append ``records`` (the batch forgets its highest offsets)."""
        self._forget()
        super().extend(records)

    def insert(self, index: Any, record: Record) -> None:
        """Insert ``record`` (the batch forgets its highest offsets)."""
        self._forget()
        super().insert(index, record)

    def pop(self, index: Any = -1) -> Record:
        """Remove and return a record (the batch forgets its highest offsets)."""
        self._forget()
        return super().pop(index)

    def remove(self, record: Record) -> None:
        """Remove ``record`` (the batch forgets its highest offsets)."""
        self._forget()
        super().remove(record)

    def clear(self) -> None:
        """Remove every record (the batch forgets its highest offsets)."""
        self._forget()
        super().clear()
