"""The broker command line with typed messages and CloudEvents: publish from JSON, consume decoded."""

from __future__ import annotations

import io
import json
import sys
import uuid

import pytest

from broker.cli.main import main


def run(args: list[str], stdin: str, monkeypatch: pytest.MonkeyPatch) -> int:
    monkeypatch.setattr(sys, "stdin", io.StringIO(stdin))
    return main(args)


def test_publish_typed_and_cloudevents_then_consume_decoded(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"inmem://cli-ce-{uuid.uuid4().hex}"
    typed_lines = '{"n": 1}\n\n{"data": [1, 2], "key": "k", "attributes": {"a": "b"}}\n'
    assert (
        run(["publish", url, "t", "--typed", "msgpack"], typed_lines.splitlines()[0] + "\n", monkeypatch) == 0
    )
    assert (
        run(
            ["publish", url, "t", "--typed", "json", "--json"],
            typed_lines.splitlines()[2] + "\n",
            monkeypatch,
        )
        == 0
    )
    event = {
        "type": "com.example.moved",
        "source": "/robots/1",
        "id": "e-1",
        "time": "2026-11-27T12:00:00Z",
        "subject": "room 1",
        "tenant": "acme",
        "data": {"x": 1},
    }
    for mode in ("binary", "structured"):
        line = json.dumps({**event, "id": f"e-{mode}"}) + "\n"
        assert run(["publish", url, "t", "--cloudevents", mode, "-a", "src=cli"], line, monkeypatch) == 0
    capsys.readouterr()
    assert main(["consume", url, "t", "--count", "4", "--format", "json"]) == 0
    out = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert out[0]["value"] == {"n": 1} and out[0]["attributes"]["content-type"] == "application/msgpack"
    assert out[1]["value"] == [1, 2] and out[1]["key"] == "k" and out[1]["attributes"]["a"] == "b"
    for doc, mode in zip(out[2:], ("binary", "structured"), strict=True):
        assert doc["cloudevent"] == {
            "specversion": "1.0",
            "id": f"e-{mode}",
            "source": "/robots/1",
            "type": "com.example.moved",
            "time": "2026-11-27T12:00:00Z",
            "subject": "room 1",
            "datacontenttype": "application/json",
            "tenant": "acme",
        }, mode
        assert doc["value"] == {"x": 1} and doc["attributes"]["src"] == "cli", mode
    assert "ce-type" in out[2]["attributes"]
    assert out[3]["attributes"]["content-type"] == "application/cloudevents+json"


def test_bad_events_and_values_are_user_errors(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"inmem://cli-ce-{uuid.uuid4().hex}"
    assert run(["publish", url, "t", "--cloudevents", "binary"], '{"source": "/s"}\n', monkeypatch) == 2
    assert (
        run(
            ["publish", url, "t", "--cloudevents", "binary"],
            '{"type": "t", "source": "/s", "Bad": 1}\n',
            monkeypatch,
        )
        == 2
    )
    assert run(["publish", url, "t", "--typed", "json"], "not json\n", monkeypatch) == 2
    assert run(["publish", url, "t", "--cloudevents", "binary", "--json"], "{}\n", monkeypatch) == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and '"type"' in err and "extension" in err
    # A message that claims to be an event and is not: shown with its decode error.
    assert run(["publish", url, "t", "-a", "ce-specversion=1.0"], "x\n", monkeypatch) == 0
    assert main(["consume", url, "t", "--count", "1", "--format", "json"]) == 0
    (doc,) = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert "required attribute" in doc["decode_error"] and "cloudevent" not in doc
