"""Meters with two sinks: every observation reaches both, and the series are cached per label set."""

from __future__ import annotations

from broker.telemetry.metrics import ConsumerSeries, Meters, PublishSeries


class _Recording:
    """A metric sink that writes down every observation with its labels."""

    def __init__(self) -> None:
        self.seen: list[tuple[object, ...]] = []

    def publish_series(self, system: str, destination: str) -> PublishSeries:
        seen = self.seen

        class _Publish:
            def published(self, count: int, ok: bool) -> None:
                seen.append(("published", system, destination, count, ok))

        return _Publish()

    def consumer_series(self, system: str, destination: str, subscription: str) -> ConsumerSeries:
        seen, labels = self.seen, (system, destination, subscription)

        class _Consumer:
            def add(self, key: str, count: int) -> None:
                seen.append(("add", *labels, key, count))

            def handled(self, seconds: float, ok: bool) -> None:
                seen.append(("handled", *labels, seconds, ok))

            def backlog(self, value: int | None) -> None:
                seen.append(("backlog", *labels, value))

        return _Consumer()


def test_every_observation_reaches_every_sink() -> None:
    first, second = _Recording(), _Recording()
    meters = Meters("kafka", [first, second])
    meters.publish("orders").published(3, True)
    consumer = meters.consumer("orders", "billing")
    consumer.add("received", 2)
    consumer.handled(0.5, False)
    consumer.backlog(None)
    expected = [
        ("published", "kafka", "orders", 3, True),
        ("add", "kafka", "orders", "billing", "received", 2),
        ("handled", "kafka", "orders", "billing", 0.5, False),
        ("backlog", "kafka", "orders", "billing", None),
    ]
    assert first.seen == expected
    assert second.seen == expected


def test_series_are_cached_per_label_set() -> None:
    meters = Meters("nats", [_Recording(), _Recording()])
    assert meters.publish("a") is meters.publish("a")
    assert meters.publish("a") is not meters.publish("b")
    assert meters.consumer("a", "s") is meters.consumer("a", "s")
    assert meters.consumer("a", "s") is not meters.consumer("a", "t")


def test_one_sink_is_used_directly() -> None:
    sink = _Recording()
    meters = Meters("inmem", [sink])
    meters.publish("t").published(1, False)
    assert sink.seen == [("published", "inmem", "t", 1, False)]
