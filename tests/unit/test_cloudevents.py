"""broker.typed.cloudevents without a broker: layouts per protocol binding, the reference SDK reading
ours and ours reading its, validation and decode errors. (The round trips on every backend's real
server are the conformance suite's CloudEventsSuite.)"""

from __future__ import annotations

import base64
import dataclasses
import json
import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import msgpack
import pytest
from cloudevents.core.bindings import amqp, http, kafka
from cloudevents.core.formats.json import JSONFormat

import broker
from broker import typed
from broker.errors import ConfigError, DecodeError, EncodeError
from broker.message import OutboundMessage
from broker.typed import cloudevents
from broker.typed.cloudevents import CloudEvent

TIME = datetime(2026, 11, 27, 12, 0, 0, 125000, tzinfo=UTC)


@dataclasses.dataclass
class Point:
    x: int
    y: int


def received(message: OutboundMessage) -> Any:
    """What a consumer would hand out for ``message`` (attributes, data and key are all that is read)."""
    return SimpleNamespace(attributes=dict(message.attributes), data=message.data, key=message.key)


def event(**changes: Any) -> CloudEvent[Point]:
    base: CloudEvent[Point] = CloudEvent("com.example.moved", "/robots/1", Point(1, 2), id="e-1", time=TIME)
    return dataclasses.replace(base, **changes)


def test_protocols_by_backend_name_backend_or_binding_name() -> None:
    assert [cloudevents.protocol_of(n) for n in ("kafka", "servicebus", "rabbitmq", "nats")] == [
        "kafka",
        "amqp",
        "rabbitmq",
        "http",
    ]
    assert cloudevents.protocol_of(SimpleNamespace(name="pubsub")) == "http"
    assert cloudevents.protocol_of("amqp") == "amqp"
    with pytest.raises(ConfigError, match="protocol"):
        cloudevents.protocol_of("smtp")
    with pytest.raises(ConfigError):
        cloudevents.binding(Point, protocol="kafka", mode="sideways")  # type: ignore[arg-type]


def test_binary_layout_per_protocol() -> None:
    sent = event(subject="a b/ü%", extensions={"n": 7, "flag": True, "blob": b"\x00\xff", "at": TIME})
    layouts = {
        p: cloudevents.binding(Point, protocol=p).message(sent) for p in ("kafka", "amqp", "rabbitmq", "http")
    }
    assert layouts["kafka"].attributes == {
        "ce_specversion": "1.0",
        "ce_id": "e-1",
        "ce_source": "/robots/1",
        "ce_type": "com.example.moved",
        "ce_time": "2026-11-27T12:00:00.125000Z",
        "ce_subject": "a b/ü%",
        "ce_n": "7",
        "ce_flag": "true",
        "ce_blob": "AP8=",
        "ce_at": "2026-11-27T12:00:00.125000Z",
        "content-type": "application/json",
    }
    assert layouts["amqp"].attributes["cloudEvents_subject"] == "a b/ü%"
    assert layouts["rabbitmq"].attributes["ce-subject"] == "a b/ü%"  # as the SDK's RabbitMQ binding
    assert layouts["http"].attributes["ce-subject"] == "a%20b/%C3%BC%25"  # percent-encoded as HTTP
    for message in layouts.values():
        assert json.loads(message.data) == {"x": 1, "y": 2}
        assert message.key is None


def test_the_sdk_reads_what_we_write_and_we_read_what_it_writes() -> None:
    sent = event(subject="a b/ü%", extensions={"tenant": "acme/ü", "partitionkey": "r-1"})
    expected = {**sent.attributes(), "datacontenttype": "application/json"}
    for mode in ("binary", "structured"):
        bound = cloudevents.binding(Point, protocol="http", mode=mode)
        message = bound.message(sent)
        assert message.key == "r-1"  # the partitionkey extension is the key
        parsed = http.from_http(http.HTTPMessage(dict(message.attributes), message.data), JSONFormat())
        assert parsed.get_attributes() == expected, mode
        assert bound.decode_received(received(message), message.data) == dataclasses.replace(
            sent, datacontenttype="application/json"
        )
    sdk_event = kafka.from_kafka(
        kafka.KafkaMessage(
            {
                k: v.encode()
                for k, v in cloudevents.binding(Point, protocol="kafka").message(sent).attributes.items()
            },
            None,
            b'{"x": 3, "y": 4}',
        ),
        JSONFormat(),
    )
    for convert in (kafka.to_binary, kafka.to_structured):
        made = convert(sdk_event, JSONFormat())
        out = OutboundMessage(made.value, None, {k: v.decode() for k, v in made.headers.items()})
        got = cloudevents.binding(Point, protocol="kafka").decode_received(received(out), out.data)
        assert got is not None and got.attributes() == sdk_event.get_attributes()
        assert got.data == Point(3, 4)


def test_amqp_reads_both_prefixes_and_time_in_milliseconds() -> None:
    bound = cloudevents.binding(dict, protocol="servicebus")
    made = amqp.to_binary(_sdk_amqp_event(), JSONFormat())
    assert made.application_properties["cloudEvents_time"] == int(TIME.timestamp() * 1000)
    attributes = {
        k.replace("cloudEvents_", "cloudEvents:"): str(v) for k, v in made.application_properties.items()
    }
    got = bound.decode_received(SimpleNamespace(attributes=attributes), made.application_data)
    assert got is not None and got.time == TIME and got.id == "amqp-1" and got.data == {"a": 1}


def _sdk_amqp_event() -> Any:
    from cloudevents.core.v1.event import CloudEvent as SdkEvent

    return SdkEvent({"id": "amqp-1", "source": "/s", "type": "t", "time": TIME}, {"a": 1})


def test_structured_mode_inlines_json_and_base64_encodes_anything_else() -> None:
    packed = cloudevents.binding(typed.binding(Point, format="msgpack"), protocol="kafka", mode="structured")
    message = packed.message(event(extensions={"n": 7, "flag": False}))
    assert message.attributes == {"content-type": "application/cloudevents+json"}
    envelope = json.loads(message.data)
    assert envelope["datacontenttype"] == "application/msgpack"
    assert msgpack.unpackb(base64.b64decode(envelope["data_base64"])) == {"x": 1, "y": 2}
    assert envelope["n"] == 7 and envelope["flag"] is False  # typed in the JSON format
    parsed = kafka.from_structured(kafka.KafkaMessage({}, None, message.data), JSONFormat())
    assert msgpack.unpackb(parsed.get_data()) == {"x": 1, "y": 2}
    assert packed.decode_received(received(message), message.data) == event(
        datacontenttype="application/msgpack", extensions={"n": 7, "flag": False}
    )
    # As a plain binding (a TypedTopic, binding_codec) a CloudEvents binding is structured mode.
    codec = typed.binding_codec(packed)
    assert codec.decode(codec.encode(event())) == event(datacontenttype="application/msgpack")


def test_an_event_without_data_and_times_with_offsets() -> None:
    bound = cloudevents.binding(Point, protocol="nats")
    east = timezone(timedelta(hours=2))
    for mode in ("binary", "structured"):
        sent = event(data=None, time=datetime(2026, 1, 2, 3, 4, 5, tzinfo=east))
        message = bound.message(sent, mode=mode)
        got = bound.decode_received(received(message), message.data)
        assert (
            got == sent
            and got is not None
            and got.time is not None
            and got.time.utcoffset() == timedelta(hours=2)
        )
    assert bound.decode_received(received(message), None) is None  # a tombstone


def test_invalid_events_are_encode_errors() -> None:
    bound = cloudevents.binding(Point, protocol="kafka")
    for bad in (
        event(type=""),
        event(specversion="0.3"),
        event(extensions={"Bad-Name": "x"}),
        event(extensions={"data": "x"}),
        event(extensions={"n": 1.5}),
        event(subject=5),
        event(time="noon"),
        event(data=object()),
    ):
        with pytest.raises(EncodeError):
            bound.message(bad)


@pytest.mark.parametrize(
    ("attributes", "data", "match"),
    [
        ({"ce-id": "1", "ce-source": "/s", "ce-specversion": "1.0"}, b"{}", "required attribute.*type"),
        ({"content-type": "application/cloudevents+json"}, b'{"id": "1", "type": "t"}', "missing: source"),
        ({"content-type": "application/cloudevents+json"}, b"[1]", "JSON object"),
        ({"content-type": "application/cloudevents-batch+json"}, b"[]", "cloudevents-batch"),
        ({"ce-id": "1", "ce-source": "/s", "ce-type": "t", "ce-specversion": "0.3"}, b"", "specversion"),
        (
            {"ce-id": "1", "ce-source": "/s", "ce-type": "t", "ce-specversion": "1.0", "ce-time": "noon"},
            b"",
            "time",
        ),
        (
            {
                "ce-id": "1",
                "ce-source": "/s",
                "ce-type": "t",
                "ce-specversion": "1.0",
                "content-type": "text/csv",
            },
            b"x,y",
            "text/csv",
        ),
    ],
)
def test_what_is_not_a_valid_event_is_a_decode_error(
    attributes: dict[str, str], data: bytes, match: str
) -> None:
    bound = cloudevents.binding(Point, protocol="http")
    message = SimpleNamespace(attributes=attributes)
    with pytest.raises(DecodeError, match=match) as caught:
        bound.decode_received(message, data)
    assert caught.value.received is message


async def test_typed_consumers_hand_out_events_on_the_in_memory_broker() -> None:
    async with broker.connect("inmem://cloudevents-unit") as backend:
        publisher = backend.publisher()
        bound = cloudevents.binding(Point, protocol=backend)
        async with typed.messages(backend.messages("moves", "s"), bound) as consumer:
            await cloudevents.topic(publisher, "moves", Point, protocol=backend).publish(event())
            await typed.topic(publisher, "moves", bound).publish(event(id="e-2"))  # structured
            first, second = await consumer.next_message(timeout=5), await consumer.next_message(timeout=5)
    assert [first.decoded.id, second.decoded.id] == ["e-1", "e-2"]
    assert second.attributes["content-type"] == "application/cloudevents+json"
    assert first.decoded.data == second.decoded.data == Point(1, 2)


def test_the_example_runs() -> None:
    example = Path(__file__).resolve().parents[2] / "examples" / "cloudevents.py"
    result = subprocess.run([sys.executable, str(example)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        lines[0]
        == "binary: com.example.order.placed order-1 tenant=acme data=OrderPlaced(order=1, total=9.5)"
    )
    assert lines[1].startswith("structured: com.example.order.placed order-2 tenant=acme")
    assert lines[2].startswith("not a CloudEvent:") and "required attribute(s) missing" in lines[2]
