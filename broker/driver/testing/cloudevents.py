"""Conformance tests of CloudEvents (:mod:`broker.typed.cloudevents`), mixed into the suite.

Interoperability with the reference SDK (the ``cloudevents`` package, 2.2 or later), in both
directions and both content modes, on every backend:

- an event the SDK builds and converts with its own protocol binding (``cloudevents.core.bindings``:
  Kafka, AMQP, RabbitMQ, and HTTP for the backends the SDK has no binding of) is published as the
  SDK made it and received through a CloudEvents binding with every context attribute, extension
  and the typed data intact; a message missing a required attribute is a ``DecodeError``;
- an event published through :mod:`broker.typed.cloudevents` is received untyped and parsed by the
  SDK's binding with every attribute intact.

The tests skip without the ``cloudevents`` package (the ``test`` extra installs it). The helpers
:func:`sdk_outbound` and :func:`sdk_parse` convert between the SDK's protocol messages and ours.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime
from typing import Any

try:
    import pytest
except ImportError as exc:  # pragma: no cover - exercised only without the test extra
    from broker.errors import MissingDependency

    raise MissingDependency("test", "pytest") from exc

from broker import typed
from broker.driver.testing.harness import Harness, collect, need
from broker.errors import DecodeError
from broker.message import Message, OutboundMessage
from broker.typed import cloudevents
from broker.typed.formats import CONTENT_TYPE

__all__ = ["CloudEventsSuite", "Reading", "sdk_outbound", "sdk_parse"]


@dataclasses.dataclass
class Reading:
    """The typed data of the suite's events."""

    sensor: str
    celsius: float
    tags: list[str]


_TIME = datetime(2026, 11, 27, 12, 30, 15, 250000, tzinfo=UTC)  # whole milliseconds: AMQP timestamps


def _sdk_module(protocol: cloudevents.Protocol) -> Any:
    pytest.importorskip("cloudevents.core.bindings")
    import importlib

    return importlib.import_module(f"cloudevents.core.bindings.{protocol}")


def _plain(value: Any) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8")
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def sdk_outbound(sdk_message: Any, protocol: cloudevents.Protocol) -> OutboundMessage:
    """The :class:`~broker.OutboundMessage` carrying what the SDK's ``protocol`` binding made
    (``KafkaMessage``, ``AMQPMessage``, ``RabbitMQMessage``, ``HTTPMessage``): its headers or
    properties as attributes (non-string AMQP values, such as ``time`` in milliseconds, as text)."""
    if protocol == "kafka":
        key = sdk_message.key.decode() if isinstance(sdk_message.key, bytes) else sdk_message.key
        headers = {name: _plain(value) for name, value in sdk_message.headers.items()}
        return OutboundMessage(sdk_message.value, key, headers)
    if protocol == "amqp":
        attributes = {name: _plain(value) for name, value in sdk_message.application_properties.items()}
        attributes.update({name: _plain(value) for name, value in sdk_message.properties.items()})
        return OutboundMessage(sdk_message.application_data, None, attributes)
    if protocol == "rabbitmq":
        attributes = dict(sdk_message.headers)
        if sdk_message.content_type is not None:
            attributes[CONTENT_TYPE] = sdk_message.content_type
        return OutboundMessage(sdk_message.body, None, attributes)
    return OutboundMessage(sdk_message.body, None, dict(sdk_message.headers))


def sdk_parse(received: Message, protocol: cloudevents.Protocol) -> Any:
    """The SDK's event parsed by its ``protocol`` binding from ``received`` (either mode)."""
    module = _sdk_module(protocol)
    from cloudevents.core.formats.json import JSONFormat

    attributes = dict(received.attributes)
    if protocol == "kafka":
        headers = {name: value.encode() for name, value in attributes.items()}
        return module.from_kafka(module.KafkaMessage(headers, received.key, received.data), JSONFormat())
    content_type = attributes.pop(CONTENT_TYPE, None)
    if protocol == "amqp":
        properties = {} if content_type is None else {CONTENT_TYPE: content_type}
        return module.from_amqp(module.AMQPMessage(properties, attributes, received.data), JSONFormat())
    if protocol == "rabbitmq":
        return module.from_rabbitmq(
            module.RabbitMQMessage(attributes, content_type, received.data), JSONFormat()
        )
    if content_type is not None:
        attributes[CONTENT_TYPE] = content_type
    return module.from_http(module.HTTPMessage(attributes, received.data), JSONFormat())


def _sdk_event(event_id: str) -> Any:
    pytest.importorskip("cloudevents.core.v1.event")
    from cloudevents.core.v1.event import CloudEvent as SdkEvent

    attributes = {
        "id": event_id,
        "source": "https://example.com/sensors/7",
        "type": "com.example.reading",
        "specversion": "1.0",
        "time": _TIME,
        "subject": "room 1 / ünï",
        "dataschema": "https://example.com/schemas/reading.json",
        "datacontenttype": "application/json",
        "tenant": "acme corp/ü%20",
        "partitionkey": "sensor-7",
    }
    return SdkEvent(attributes, {"sensor": "s-7", "celsius": 21.5, "tags": ["a", "b"]})


class CloudEventsSuite:
    """CloudEvents in binary and structured mode, interoperating with the reference SDK."""

    async def test_cloudevents_from_the_sdk_binary_and_structured(self, harness: Harness) -> None:
        """Events the SDK's binding made arrive with every attribute; a non-event is a DecodeError."""
        need(harness, "messages")
        protocol = cloudevents.protocol_of(harness.backend)
        module = _sdk_module(protocol)
        from cloudevents.core.formats.json import JSONFormat

        events = {"binary": _sdk_event("sdk-binary"), "structured": _sdk_event("sdk-structured")}
        outbound = [
            sdk_outbound(module.to_binary(events["binary"], JSONFormat()), protocol),
            sdk_outbound(module.to_structured(events["structured"], JSONFormat()), protocol),
        ]
        broken = dict(outbound[0].attributes)
        del broken[cloudevents.BINDING_PREFIXES[protocol] + "type"]
        outbound.append(OutboundMessage(b'{"broken": true}', None, broken))
        topic, sub = harness.name("ce-in"), harness.name("sub")
        await harness.prepare(topic, [sub])
        bound = cloudevents.binding(Reading, protocol=harness.backend)
        async with harness.messages(topic, sub) as consumer:
            await harness.backend.publisher().topic(topic).batch_publish(*outbound)
            got = typed.tag_messages(await collect(consumer, len(outbound), harness.patience), bound)
        by_data = {m.data: m for m in got}
        with pytest.raises(DecodeError, match="required attribute"):
            _ = by_data[b'{"broken": true}'].decoded
        received = {m.decoded.id: m for m in got if m.data != b'{"broken": true}'}
        assert set(received) == {"sdk-binary", "sdk-structured"}
        for mode, sdk in events.items():
            message = received[sdk.get_id()]
            event = message.decoded
            assert event.attributes() == sdk.get_attributes(), mode
            assert event.data == Reading("s-7", 21.5, ["a", "b"]), mode
            if protocol == "kafka":
                assert message.key == "sensor-7", mode  # the SDK's key mapper: the partitionkey

    async def test_cloudevents_to_the_sdk_binary_and_structured(self, harness: Harness) -> None:
        """Events published in either mode are parsed by the SDK's binding with every attribute."""
        need(harness, "messages")
        protocol = cloudevents.protocol_of(harness.backend)
        _sdk_module(protocol)
        modes: tuple[cloudevents.Mode, ...] = ("binary", "structured")
        events = {
            mode: cloudevents.CloudEvent(
                "com.example.reading",
                "/sensors/7",
                Reading("s-7", 21.5, ["a", "ü"]),
                id=f"ours-{mode}",
                time=_TIME,
                subject="room 1 / ünï",
                extensions={"tenant": "acme corp/ü%20", "partitionkey": "sensor-7"},
            )
            for mode in modes
        }
        topic, sub = harness.name("ce-out"), harness.name("sub")
        await harness.prepare(topic, [sub])
        publisher = harness.backend.publisher()
        async with harness.messages(topic, sub) as consumer:
            for mode, event in events.items():
                handle = cloudevents.topic(publisher, topic, Reading, protocol=harness.backend, mode=mode)
                await handle.publish(event)
            got = await collect(consumer, len(events), harness.patience)
        bound = cloudevents.binding(Reading, protocol=harness.backend)
        for message in got:
            parsed = sdk_parse(message, protocol)
            mode = parsed.get_id().removeprefix("ours-")
            sent = events[mode]
            assert message.key == "sensor-7", mode
            if mode == "structured":
                assert message.attributes[CONTENT_TYPE] == cloudevents.STRUCTURED_CONTENT_TYPE
            expected = {**sent.attributes(), "datacontenttype": "application/json"}
            assert parsed.get_attributes() == expected, mode
            assert sent.data is not None and parsed.get_data() == dataclasses.asdict(sent.data), mode
            ours = typed.tag_message(message, bound).decoded
            assert ours == dataclasses.replace(sent, datacontenttype="application/json"), mode
