"""The committed AsyncAPI spec (docs/protocol/asyncapi.json) is true to ws_edge/messages.py."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import msgspec
import pytest

from infra.protocol_spec import (
    REGENERATE,
    SPEC_PATH,
    SPEC_VERSION,
    build_spec,
    diff_paths,
    main,
    render,
)
from schemas.events import ErrorInfo, FeedbackKind, FinishReason, Timings, Usage
from ws_edge import messages as m

try:
    import jsonschema
except ImportError:  # not a declared dependency: fall back to checking by hand
    jsonschema = None

CHANGELOG = SPEC_PATH.parent / "CHANGELOG.md"
CLIENT_TYPES = [t.__struct_config__.tag for t in m.AnyClientMessage.__args__]
SERVER_TYPES = [t.__struct_config__.tag for t in m.AnyServerEvent.__args__]


@pytest.fixture(scope="module")
def spec() -> dict[str, Any]:
    return build_spec()


def test_committed_spec_is_current(spec: dict[str, Any]) -> None:
    assert SPEC_PATH.exists(), f"{SPEC_PATH} is missing: run {REGENERATE}"
    committed = SPEC_PATH.read_text(encoding="utf-8")
    changes = diff_paths(json.loads(committed), spec)
    assert not changes, f"the protocol spec is stale: run {REGENERATE}\n" + "\n".join(changes)
    assert committed == render(spec), f"the protocol spec is not in its rendered form: {REGENERATE}"


def test_rendering_is_deterministic() -> None:
    assert render(build_spec()) == render(build_spec())


def test_document_and_version(spec: dict[str, Any]) -> None:
    assert spec["asyncapi"] == "3.0.0"
    version = spec["info"]["version"]
    assert version == SPEC_VERSION
    assert version.startswith(f"{m.PROTOCOL_VERSION}.")
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert spec["servers"]["local"]["host"] == "127.0.0.1:8765"
    assert spec["servers"]["local"]["protocol"] == "ws"


def test_changelog_newest_entry_is_the_spec_version() -> None:
    versions = re.findall(r"^## (\d+\.\d+\.\d+)", CHANGELOG.read_text(encoding="utf-8"), re.M)
    assert versions, "docs/protocol/CHANGELOG.md has no version entries"
    assert versions[0] == SPEC_VERSION, (
        f"newest changelog entry {versions[0]} != spec version {SPEC_VERSION}: add an entry "
        "and bump PROTOCOL_MINOR in infra/protocol_spec.py together"
    )
    assert versions == sorted(versions, key=lambda v: tuple(map(int, v.split("."))), reverse=True)
    assert versions[-1] == f"{m.PROTOCOL_VERSION}.0.0"


def test_every_message_type_is_a_message(spec: dict[str, Any]) -> None:
    messages = spec["components"]["messages"]
    assert set(messages) == set(CLIENT_TYPES) | set(SERVER_TYPES)
    assert set(spec["channels"]["edge"]["messages"]) == set(messages)
    for tag, message in messages.items():
        assert message["name"] == tag
        assert message.get("summary"), f"{tag}: give its struct a docstring"
        schema = _schema(spec, message["payload"]["$ref"])
        assert schema["properties"]["type"]["enum"] == [tag]
        assert "type" in schema["required"]
    ops = spec["operations"]
    assert ops["receive"]["action"] == "receive"
    assert ops["send"]["action"] == "send"
    assert [r["$ref"].rsplit("/", 1)[1] for r in ops["receive"]["messages"]] == CLIENT_TYPES
    assert [r["$ref"].rsplit("/", 1)[1] for r in ops["send"]["messages"]] == SERVER_TYPES


def test_every_reference_resolves(spec: dict[str, Any]) -> None:
    refs: list[str] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            if isinstance(node.get("$ref"), str):
                refs.append(node["$ref"])
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(spec)
    assert len(refs) > 50
    for ref in refs:
        _schema(spec, ref)  # raises KeyError if dangling


def test_handshake_auth_is_documented(spec: dict[str, Any]) -> None:
    ws = spec["channels"]["edge"]["bindings"]["ws"]
    assert "token" in ws["query"]["properties"]
    assert "Authorization" in ws["headers"]["properties"]
    assert "Bearer" in spec["channels"]["edge"]["description"]
    schemes = spec["components"]["securitySchemes"]
    assert schemes["bearer"]["scheme"] == "bearer"
    assert (schemes["queryToken"]["in"], schemes["queryToken"]["name"]) == ("query", "token")


EXAMPLES: list[m.ClientMessage | m.ServerEvent] = [
    m.CreateTurn(
        conversation_id="conv-1",
        text="What is in this picture, and what did I say?",
        parts=[
            m.TextPart("look:"),
            m.ImagePart(url="https://example.com/cat.png"),
            m.AudioPart(stream_id="mic-1", format="pcm16", sample_rate=16000),
        ],
        client_turn_id="c-1",
        max_tokens=256,
        temperature=0.2,
        speech=m.SpeechOptions(voice="joe"),
    ),
    m.SessionUpdate(
        speech=m.SpeechOptions(),
        turn_detection=m.TurnDetection(conversation_id="conv-1", stream_id="mic-1"),
    ),
    m.InterruptTurn(turn_id="t-1", audio_end_ms=1250.0),
    m.Feedback(turn_id="t-1", kind=FeedbackKind.THUMBS_UP, comment="great"),
    m.SessionReady(session_id="s", edge_id="e", user_id="u", tenant_id="acme"),
    m.ResponseAudio(
        turn_id="t-1",
        index=0,
        text="Hello there.",
        char_start=0,
        sample_rate=22050,
        duration_ms=812.5,
        audio="AAABAAIA",
    ),
    m.ResponseAudioDone(turn_id="t-1", reason="error", error=ErrorInfo("tts_failed", "boom")),
    m.ResponseDone(
        turn_id="t-1",
        finish_reason=FinishReason.STOP,
        text="Hello there.",
        usage=Usage(prompt_tokens=12, completion_tokens=3),
        timings=Timings(queue_ms=1.5, ttft_ms=40.0, e2e_ms=90.0, itl_ms=[10.0, 12.5]),
        model="smollm2",
    ),
    m.ErrorEvent(
        code="rate_limited",
        message="slow down",
        retryable=True,
        retry_after_ms=1500,
        client_turn_id="c-1",
    ),
    m.InputSpeechStopped(stream_id="mic-1", audio_end_ms=3200.0, ignored="backchannel"),
]


@pytest.mark.parametrize("message", EXAMPLES, ids=lambda x: x.__struct_config__.tag)
def test_real_encoded_messages_validate(spec: dict[str, Any], message: Any) -> None:
    tag = message.__struct_config__.tag
    wire = (
        m.encode_server(message) if isinstance(message, m.ServerEvent) else m.encode_client(message)
    )
    decoder = m.server_decoder if isinstance(message, m.ServerEvent) else m.client_decoder
    assert decoder.decode(wire) == message  # a real frame, as the edge reads it
    payload = json.loads(wire)
    _validate(spec, tag, payload)


def test_schema_rejects_what_the_edge_rejects(spec: dict[str, Any]) -> None:
    """The payload schemas are not vacuous: a frame the decoder refuses fails them too."""
    bad_frames = [
        ("turn.create", {"type": "turn.create", "text": "no conversation"}),
        ("turn.create", {"type": "turn.create", "conversation_id": "c", "colour": "red"}),
        ("turn.create", {"type": "turn.create", "conversation_id": "c", "max_tokens": 0}),
        ("turn.create", {"type": "turn.cancel", "conversation_id": "c"}),
    ]
    for tag, frame in bad_frames:
        with pytest.raises(msgspec.ValidationError):
            m.client_decoder.decode(json.dumps(frame))
        if jsonschema is None and ("colour" in frame or "max_tokens" in frame):
            continue  # the hand check covers required fields and the tag only
        with pytest.raises(AssertionError):
            _validate(spec, tag, frame)


def test_check_reports_a_stale_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "asyncapi.json"
    stale = build_spec()
    stale["info"]["version"] = "0.0.0"
    del stale["components"]["messages"]["pong"]
    path.write_text(render(stale), encoding="utf-8")
    assert main(["--check", "--path", str(path)]) == 1
    out = capsys.readouterr().out
    assert REGENERATE in out
    assert "~ /info/version" in out and "+ /components/messages/pong" in out
    assert main(["--write", "--path", str(path)]) == 0
    assert main(["--check", "--path", str(path)]) == 0


def _schema(spec: dict[str, Any], ref: str) -> Any:
    node: Any = spec
    for key in ref.removeprefix("#/").split("/"):
        node = node[key]
    return node


def _validate(spec: dict[str, Any], tag: str, payload: dict[str, Any]) -> None:
    """Validate a frame against its message's payload schema; AssertionError if it fails."""
    ref = spec["components"]["messages"][tag]["payload"]["$ref"]
    if jsonschema is not None:
        # AsyncAPI's schema format is a superset of JSON Schema draft 7
        root = {"$ref": ref, "components": {"schemas": spec["components"]["schemas"]}}
        errors = list(jsonschema.Draft7Validator(root).iter_errors(payload))
        assert not errors, [f"{list(e.path)}: {e.message}" for e in errors]
        return
    schema = _schema(spec, ref)
    assert payload.get("type") in schema["properties"]["type"]["enum"], payload.get("type")
    missing = [name for name in schema["required"] if name not in payload]
    assert not missing, missing


def test_a_client_sends_only_what_it_sets_so_older_edges_still_take_it():
    """An edge refuses fields it does not know: a `turn.create` that uses nothing new must
    carry no new field (not even a null or an empty list)."""
    from ws_edge.messages import CreateTurn

    frame = msgspec.json.decode(msgspec.json.encode(CreateTurn(conversation_id="c1", text="hi")))
    assert frame == {"type": "turn.create", "conversation_id": "c1", "text": "hi"}
