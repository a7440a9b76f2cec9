"""Settings of the marker-topic queue and its redelivery tracker."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from broker.driver.settings import normalize_choices
from broker.errors import ConfigError

__all__ = [
    "GO_TRACKER_GROUP",
    "HEADER_ATTEMPT",
    "HEADER_KEY",
    "HEADER_ORIGINAL_ID",
    "HEADER_REDELIVERY_FOR",
    "QueueSettings",
    "RedeliveryBackoff",
    "queue_settings_for_topic",
]

#: Header carrying the delivery attempt of a redelivered copy (absent: 1).
HEADER_ATTEMPT = "mq-delivery-attempt"
#: Header carrying the first copy's ``partition:offset`` so a message keeps its id across redeliveries.
HEADER_ORIGINAL_ID = "mq-original-id"
#: Header naming the queue a redelivered copy is for (other queues reading the topic skip it).
HEADER_REDELIVERY_FOR = "mq-redelivery-for"
#: Header carrying the application's key where the record key must be the queue id.
HEADER_KEY = "mq-key"

_MAX_TIMEOUT = 12 * 3600.0

#: The consumer group of kafka-mq-go's redelivery trackers (fixed in its source).
GO_TRACKER_GROUP = "kafka-mq-redelivery"


#: kafka-mq-go's redeliverer gives up on a message after a week of failures (its backoff's
#: ``MaxElapsedTime`` of 168 h).
_WEEK = 168 * 3600.0


@dataclass(frozen=True, slots=True)
class RedeliveryBackoff:
    """How the tracker retries a failing redelivery (kafka-mq-go's ``backoffPolicy``).

    Every write or read of one redelivery (re-sending the message, reading it back from the queue
    topic, writing END) is retried after ``start`` seconds, then each wait ``factor`` times the last,
    at most ``maximum``, each spread by +-``jitter`` (0.5: anywhere from half to one and a half
    times the wait). Once a redelivery has failed for ``max_elapsed`` seconds the tracker gives up
    on it: the message goes to ``dead_letter_topic`` (with a ``dead_letter_reason`` header) when one
    is set; otherwise the give-up is reported (an ERROR log, the ``abandoned`` count of
    ``QueueMetrics``, ``RedeliveryTracker.on_give_up``) and the message stays started, so a
    restarted tracker tries again: nothing is lost. ``max_elapsed=None`` retries forever.
    """

    #: The first wait, in seconds.
    start: float = 0.05
    #: Each wait is the previous one times this (1: constant waits).
    factor: float = 2.0
    #: Randomization of each wait: a wait ``w`` becomes uniform in ``[w*(1-jitter), w*(1+jitter)]``.
    jitter: float = 0.5
    #: The longest wait, in seconds.
    maximum: float = 30.0
    #: Seconds of failures after which the tracker gives up on one redelivery (None: never).
    max_elapsed: float | None = _WEEK

    def __post_init__(self) -> None:
        if not self.start > 0:
            raise ConfigError(f"RedeliveryBackoff.start must be > 0 seconds, got {self.start}")
        if not self.factor >= 1:
            raise ConfigError(f"RedeliveryBackoff.factor must be >= 1, got {self.factor}")
        if not 0 <= self.jitter < 1:
            raise ConfigError(f"RedeliveryBackoff.jitter must be in [0, 1), got {self.jitter}")
        if not self.maximum >= self.start:
            raise ConfigError(f"RedeliveryBackoff.maximum ({self.maximum}) must be >= start ({self.start})")
        if self.max_elapsed is not None and not self.max_elapsed > 0:
            raise ConfigError(f"RedeliveryBackoff.max_elapsed must be > 0 or None, got {self.max_elapsed}")

    def wait(self, retry: int, rand: float, ceiling: float | None = None) -> float:
        """The wait before retry number ``retry`` (1 for the first), for a ``rand`` in [0, 1).

        ``ceiling`` lowers ``maximum`` for one step (the tracker reads back at most every 2 s).
        """
        most = self.maximum if ceiling is None else min(ceiling, self.maximum)
        base = min(self.start * self.factor ** min(retry - 1, 64), most)
        return base * (1 - self.jitter + 2 * self.jitter * rand)


@dataclass(frozen=True, slots=True)
class QueueSettings:
    """Topics, timeouts and limits of one queue deployment (shared by producers, consumers, trackers).

    Defaults follow kafka-mq-go's documented defaults (which its YAML loader never applied).
    """

    #: The queue (message) topic.
    message_topic: str
    #: The markers topic; created with the message topic's partition count when missing.
    marker_topic: str
    #: Seconds a started message may go without END or KEEPALIVE before it is redelivered (<= 12 h).
    redelivery_timeout: float = 60.0
    #: Messages a consumer holds ready for ``receive()`` (back-pressure beyond it).
    receive_buffer_capacity: int = 1000
    #: Seconds one poll of the queue topic waits.
    next_message_timeout: float = 1.0
    #: Largest batch one poll returns (one START and one commit per batch); kafka-mq-go's
    #: consumer-max-messages-per-commit default.
    max_messages_per_poll: int = 1000
    #: Consumer group of queue consumers: ``group_prefix + queue id``.
    group_prefix: str = "kafka-mq-"
    #: Consumer group of the redelivery trackers. None: ``kafka-mq-redelivery-<marker_topic>``, a
    #: group per markers topic (trackers of unrelated queues never rebalance each other, and a
    #: kafka-mq-go tracker, whose group is fixed, never takes our markers partitions); with
    #: ``go_fleet``, kafka-mq-go's own ``kafka-mq-redelivery``.
    tracker_group: str = None  # type: ignore[assignment]  # resolved in __post_init__
    #: Seconds after the last marker seen in a partition before the tracker's clock runs on local time
    #: (until then "now" is the newest marker's timestamp). kafka-mq-go documents 60 s, which holds a
    #: quiet partition's redeliveries back by up to a minute; 1 s keeps them on time.
    use_now_if_no_marker_seen: float = 1.0
    #: Markers added between two offset commits of the tracker.
    num_offsets_per_commit: int = 1000
    #: Deliveries after which a message goes to ``dead_letter_topic`` instead (None: unlimited).
    max_deliveries: int | None = None
    #: Where dead-lettered messages go (None: they are dropped with a warning).
    dead_letter_topic: str | None = None
    #: Seconds between tracker passes when no marker arrives.
    tracker_poll_interval: float = 0.2
    #: How a tracker retries a failing redelivery, and when it gives up on one (a
    #: :class:`RedeliveryBackoff`; None: its defaults, with the tracker's ``max_backoff``).
    redelivery_backoff: RedeliveryBackoff | None = None
    #: ``"batched"`` (the default): one START per fetched batch and one END per group of acks
    #: (``version = 1`` markers; trackers read the messages back from the queue topic to
    #: redeliver them). A kafka-mq-go tracker skips them (its decoder refuses them: it logs
    #: "Could not unmarshal marker") and so never redelivers them.
    #: ``"per-message"``: kafka-mq-go's one marker per message with the payload in START.
    #: Trackers here read both. None: ``"per-message"`` with ``go_fleet``, else ``"batched"``.
    marker_format: Literal["batched", "per-message"] | None = None
    #: Share the queue with a kafka-mq-go fleet (its producers, consumers or trackers on the same
    #: topics): per-message markers, trackers in kafka-mq-go's group ``kafka-mq-redelivery`` (two
    #: groups would each redeliver every message), and queue mode only (topic mode, several
    #: subscriptions of one topic, is refused: a Go tracker's redelivered copies carry no
    #: subscription and would reach every one; ``ConfigError``). Redeliveries made by a Go tracker
    #: carry the payload only: no key, attributes, delivery attempt or id of the first copy, so
    #: they arrive as new messages (attempt 1) and ``max_deliveries`` (``max_attempts``) never
    #: stops them. See docs/kafka-queue.md, "Go interoperability", for the supported combinations.
    go_fleet: bool = False
    #: Fetched batches whose START is being written or whose position is being committed at once
    #: (their order is kept: a batch is committed and handed out only after the one before).
    batches_in_flight: int = 4
    #: Hand-out marks (``"batched"`` markers only): before a message reaches the application, a
    #: KEEPALIVE marks it handed out; after a crash only marked messages count a delivery attempt
    #: when redelivered. Marks are written ahead of receiving, about four marker round trips of
    #: messages and at most this many; a consumer that would need more (it takes messages faster)
    #: has its batches counted at START instead. 0: no marks, every STARTed message counts.
    handout_window: int = 1000
    #: Seconds a call that waits for a marker or dead-letter write (``in_progress``,
    #: ``dead_letter``) may take before it raises ``Timeout`` (the Kafka backend passes its own).
    operation_timeout: float = 30.0
    #: Seconds ``close()`` waits for marker writes still on their way; what has not reached the log
    #: then is counted in one WARNING and its messages are redelivered after the redelivery timeout
    #: (the Kafka backend passes its own).
    close_timeout: float = 10.0

    def __post_init__(self) -> None:
        normalize_choices(self)
        if not self.message_topic or not self.marker_topic:
            raise ConfigError("the queue needs a message_topic and a marker_topic")
        if self.message_topic == self.marker_topic:
            raise ConfigError("message_topic and marker_topic must differ")
        if not 0 < self.redelivery_timeout <= _MAX_TIMEOUT:
            raise ConfigError(f"redelivery_timeout must be in (0, 12h], got {self.redelivery_timeout}")
        if self.marker_format is None:
            object.__setattr__(self, "marker_format", "per-message" if self.go_fleet else "batched")
        if self.tracker_group is None:
            group = GO_TRACKER_GROUP if self.go_fleet else f"{GO_TRACKER_GROUP}-{self.marker_topic}"
            object.__setattr__(self, "tracker_group", group)
        if not self.tracker_group:
            raise ConfigError("tracker_group must be a non-empty name")
        if self.marker_format not in ("batched", "per-message"):
            raise ConfigError(f"marker_format is 'batched' or 'per-message', got {self.marker_format!r}")
        if self.go_fleet:
            if self.marker_format != "per-message":
                raise ConfigError("go_fleet writes per-message markers (kafka-mq-go cannot read batched)")
            if self.tracker_group != GO_TRACKER_GROUP:
                raise ConfigError(
                    f"go_fleet trackers join kafka-mq-go's group {GO_TRACKER_GROUP!r} "
                    f"(got {self.tracker_group!r}): in two groups every message would be redelivered twice"
                )
        for name in (
            "receive_buffer_capacity",
            "max_messages_per_poll",
            "num_offsets_per_commit",
            "batches_in_flight",
        ):
            if getattr(self, name) <= 0:
                raise ConfigError(f"{name} must be > 0, got {getattr(self, name)}")
        if self.handout_window < 0:
            raise ConfigError(f"handout_window must be >= 0, got {self.handout_window}")
        if not self.tracker_poll_interval > 0:  # also refuses NaN
            raise ConfigError(
                "tracker_poll_interval must be > 0 (0 would spin the tracker loop), "
                f"got {self.tracker_poll_interval}"
            )
        if self.dead_letter_topic is not None and self.dead_letter_topic in (
            self.message_topic,
            self.marker_topic,
        ):
            raise ConfigError(
                "dead_letter_topic must differ from message_topic and marker_topic, "
                f"got {self.dead_letter_topic!r}"
            )
        for name in ("operation_timeout", "close_timeout"):
            if not getattr(self, name) > 0:  # also refuses NaN
                raise ConfigError(f"{name} must be > 0 seconds, got {getattr(self, name)}")
        if self.next_message_timeout <= 0:
            raise ConfigError(f"next_message_timeout must be > 0, got {self.next_message_timeout}")
        if self.use_now_if_no_marker_seen < 0:
            raise ConfigError("use_now_if_no_marker_seen must be >= 0")
        if self.redelivery_backoff is not None and not isinstance(self.redelivery_backoff, RedeliveryBackoff):
            raise ConfigError(
                f"redelivery_backoff must be a RedeliveryBackoff or None, got {self.redelivery_backoff!r}"
            )
        if self.max_deliveries is not None and self.max_deliveries < 1:
            raise ConfigError(f"max_deliveries must be >= 1, got {self.max_deliveries}")

    @property
    def marks_handout(self) -> bool:
        """True when consumers write hand-out marks (batched markers and a ``handout_window``)."""
        return self.marker_format == "batched" and self.handout_window > 0

    @property
    def redelivery_timeout_ms(self) -> int:
        """The redelivery timeout in milliseconds, as markers carry it."""
        return int(self.redelivery_timeout * 1000)


def queue_settings_for_topic(topic: str, options: dict[str, Any]) -> QueueSettings:
    """The queue settings for per-message consumption of ``topic``.

    ``options`` are QueueSettings fields; ``ack_deadline`` is accepted for ``redelivery_timeout`` (the
    portable name) and ``max_attempts`` for ``max_deliveries``; the markers topic defaults to
    ``<topic>.markers``. Unknown names raise UnknownSetting.
    """
    from broker.driver.settings import build_settings

    values = dict(options)
    for portable, own in (("ack_deadline", "redelivery_timeout"), ("max_attempts", "max_deliveries")):
        if portable in values:
            if own in values:
                raise ConfigError(f"give {portable!r} or {own!r}, not both")
            values[own] = values.pop(portable)
    values.setdefault("marker_topic", f"{topic}.markers")
    if "message_topic" in values:
        raise ConfigError("the message topic is the topic being consumed; do not set message_topic")
    values["message_topic"] = topic
    return build_settings(QueueSettings, values, backend="kafka")
