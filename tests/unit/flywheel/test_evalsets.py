"""The eval set builder's pure parts: rows → items, conversations, media files, dedup and
order, versions, file parsing and the command line with files only (no services)."""

from __future__ import annotations

import io
import json
import random
import wave
from collections import Counter
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import SimpleNamespace
from zoneinfo import ZoneInfo

import msgspec
import pytest

from flywheel import evalsets
from flywheel.evalsets import Options, build, main
from flywheel.inputs import (
    EvalSetError,
    bundled_redteam,
    golden_items,
    redteam_items,
    regression_items,
)
from flywheel.media import extension, media_file, wav_from_pcm16
from flywheel.selection import (
    COLUMNS,
    Assessment,
    Draft,
    RecordedTurn,
    Skip,
    Window,
    arrange,
    assess,
    conversation,
    finish,
    notes_text,
    parse_when,
    selection_sql,
    version_name,
)
from harness.factories import submitted
from runtime.settings import Settings
from schemas.codec import encode
from schemas.events import MediaKind, MediaRef, Truncation
from schemas.flywheel import (
    EvalItem,
    EvalSetManifest,
    Expect,
    ItemTurn,
    MediaItem,
    Provenance,
    SetKind,
    read_jsonl,
)

NOW = datetime(2025, 3, 4, 5, 6, 7, tzinfo=UTC)
PNG = b"\x89PNG\r\n\x1a\n" + bytes(range(40))


def turn(turn_id: str = "t1", **fields) -> RecordedTurn:
    values = {
        "conversation_id": "c1",
        "tenant_id": "acme",
        "submitted_at": NOW - timedelta(hours=1),
    }
    return RecordedTurn(turn_id=turn_id, **{**values, **fields})


def row(**fields) -> tuple:
    """A selection row as a ClickHouse client hands it back (naive UTC time)."""
    values = {
        "turn_id": "t1",
        "conversation_id": "c1",
        "tenant_id": "acme",
        "submitted_at": datetime(2025, 3, 4, 4, 0, 0, 123000),
        "status": "completed",
        "finish_reason": "stop",
        "error_code": "",
        "input_safety": "allow",
        "safety_labels": [],
        "cut_window": -1,
        "image_count": 0,
        "audio_count": 0,
        "feedback": [],
        "answer": "",
        "audit": "",
        **fields,
    }
    return tuple(values[c] for c in COLUMNS)


def asked(turn_id: str, at_ms: float, text: str = "q", **fields):
    return submitted(turn_id, conversation_id="c1", text=text, submitted_at_ms=at_ms, **fields)


# --- the window ------------------------------------------------------------------------------


def test_since_takes_durations_and_iso_times():
    assert parse_when("7d", NOW) == NOW - timedelta(days=7)
    assert parse_when("12h", NOW) == NOW - timedelta(hours=12)
    assert parse_when("30m", NOW) == NOW - timedelta(minutes=30)
    assert parse_when("2w", NOW) == NOW - timedelta(weeks=2)
    assert parse_when("2025-03-01", NOW) == datetime(2025, 3, 1, tzinfo=UTC)
    assert parse_when("2025-03-01T12:00:00+02:00", NOW) == datetime(2025, 3, 1, 10, tzinfo=UTC)
    with pytest.raises(ValueError, match="neither a duration"):
        parse_when("last week", NOW)


def test_selection_sql_per_kind_keeps_its_parameters_unbound():
    fix = selection_sql(SetKind.FIX, "ts_test")
    assert "ts_test.traces AS t FINAL" in fix and "{db}" not in fix
    assert "{since:DateTime64(3)}" in fix and "{tenant:String}" in fix
    assert "'thumbs_down'" in fix and "v.action AS audit" in fix and "LIMIT" not in fix
    assert "t.run_id = ''" in fix  # replayed turns stay out
    assert "run_id" not in selection_sql(SetKind.FIX, "ts_test", live_only=False)
    assert selection_sql(SetKind.FIX, "ts_test", limit=True).endswith("LIMIT {limit:UInt32}")
    golden = selection_sql(SetKind.GOLDEN, "turnstream")
    assert "a.text AS answer" in golden and "turnstream.turns" in golden
    assert "t.input_safety = 'block'" in selection_sql(SetKind.REDTEAM, "turnstream")
    assert "t.image_count > 0" in selection_sql(SetKind.MULTIMODAL, "turnstream")
    with pytest.raises(ValueError):
        selection_sql(SetKind.REGRESSION, "turnstream")
    window = Window(NOW - timedelta(days=1), NOW, "acme")
    assert window.parameters(5) == {
        "since": window.since,
        "until": NOW,
        "tenant": "acme",
        "limit": 5,
    }


# --- rows → assessments ----------------------------------------------------------------------


def test_a_row_becomes_a_recorded_turn_in_utc():
    recorded = RecordedTurn.from_row(row(feedback=["stop", "thumbs_down", "stop"], answer=None))
    assert recorded.submitted_at == datetime(2025, 3, 4, 4, 0, 0, 123000, tzinfo=UTC)
    assert recorded.feedback == ("stop", "thumbs_down")  # sorted, once each
    assert recorded.answer == ""
    with pytest.raises(ValueError):  # a query with other columns is a bug, not data
        RecordedTurn.from_row(row()[:-1])


def test_fix_reasons_in_order_and_what_they_expect():
    bad = turn(
        feedback=("abandon", "thumbs_down"), input_safety="block", error_code="input_blocked"
    )
    a = assess(SetKind.FIX, bad)
    assert isinstance(a, Assessment)
    assert a.reasons == ["thumbs_down", "abandon", "safety_block"]
    assert a.expect is Expect.ANSWER  # users complained: an answer was wanted
    safety_only = assess(SetKind.FIX, turn(cut_window=2, audit="block", safety_labels=("x",)))
    assert isinstance(safety_only, Assessment)
    assert safety_only.reasons == ["output_cut", "audit_block"]
    assert safety_only.expect is Expect.ANY  # whether the check was right is for a person
    assert safety_only.tags == ["audit_block", "output_cut", "x"]
    failed = assess(SetKind.FIX, turn(finish_reason="error", error_code="engine_failed"))
    assert isinstance(failed, Assessment)
    assert (failed.reasons, failed.expect) == (["error"], Expect.ANSWER)
    assert "error:engine_failed" in failed.tags
    late = assess(SetKind.FIX, turn(status="timed_out", finish_reason="", error_code="timed_out"))
    assert isinstance(late, Assessment) and late.reasons == ["timed_out"]
    assert assess(SetKind.FIX, turn(feedback=("copy_code", "thumbs_up"))) == Skip(
        "no longer a bad case"
    )


def test_golden_redteam_and_multimodal_assessments():
    liked = assess(SetKind.GOLDEN, turn(feedback=("thumbs_up",), answer="Paris."))
    assert isinstance(liked, Assessment)
    assert (liked.reference, liked.expect, liked.reasons) == (
        "Paris.",
        Expect.ANSWER,
        ["thumbs_up"],
    )
    assert assess(SetKind.GOLDEN, turn(feedback=("thumbs_up",))) == Skip("no recorded answer")
    mixed = turn(feedback=("regenerate", "thumbs_up"), answer="x")
    assert assess(SetKind.GOLDEN, mixed) == Skip("no longer liked")
    blocked = assess(SetKind.REDTEAM, turn(input_safety="block", safety_labels=("injection",)))
    assert isinstance(blocked, Assessment)
    assert (blocked.expect, blocked.tags) == (Expect.REFUSE, ["injection", "safety_block"])
    assert assess(SetKind.REDTEAM, turn()) == Skip("not blocked")
    image = assess(SetKind.MULTIMODAL, turn(image_count=2, audio_count=1))
    assert isinstance(image, Assessment)
    assert (image.reasons, image.expect) == (["image", "audio"], Expect.ANSWER)
    failed = assess(SetKind.MULTIMODAL, turn(audio_count=1, finish_reason="error"))
    assert isinstance(failed, Assessment) and failed.expect is Expect.ANY
    assert assess(SetKind.MULTIMODAL, turn()) == Skip("no media")


# --- conversations ---------------------------------------------------------------------------


def test_conversation_up_to_the_turn_in_order():
    events = [
        asked("t3", 3000, "third"),
        asked("t1", 1000, "first"),
        asked("t2", 2000, "second"),
        asked("t2", 2000, "second"),  # a re-inserted event
        asked("t4", 4000, "after"),
        submitted("x", conversation_id="c1", tenant_id="other", submitted_at_ms=1500),
        submitted("y", conversation_id="c2", submitted_at_ms=1500),
    ]
    got = conversation(turn("t3"), events, max_turns=20)
    assert got is not None and [e.turn_id for e in got] == ["t1", "t2", "t3"]
    last_two = conversation(turn("t3"), events, max_turns=2)
    assert last_two is not None and [e.turn_id for e in last_two] == ["t2", "t3"]
    assert conversation(turn("gone"), events, max_turns=20) is None


def test_conversation_ties_by_turn_id_and_leaves_out_withdrawn_turns():
    withdraw = [Truncation(turn_id="t2", text="", withdrawn=True)]
    events = [
        asked("t1b", 1000),
        asked("t1a", 1000),
        asked("t2", 2000),
        asked("t3", 3000, truncates=withdraw),
    ]
    got = conversation(turn("t3"), events, max_turns=20)
    assert got is not None and [e.turn_id for e in got] == ["t1a", "t1b", "t3"]
    # a turn withdrawn only later still counts up to itself (its own item is its own turn)
    own = conversation(turn("t2"), events, max_turns=20)
    assert own is not None and [e.turn_id for e in own] == ["t1a", "t1b", "t2"]


# --- drafts → items --------------------------------------------------------------------------


def draft(recorded: RecordedTurn, turns, kind: SetKind = SetKind.FIX) -> Draft:
    assessment = assess(kind, recorded)
    assert isinstance(assessment, Assessment)
    return Draft(kind, recorded, turns, assessment, "SELECT 1")


def test_an_item_carries_its_conversation_and_provenance():
    recorded = turn("t2", feedback=("thumbs_down",))
    item = finish(draft(recorded, [asked("t1", 1000, "hi"), asked("t2", 2000, "and?")]), {})
    assert isinstance(item, EvalItem)
    assert item.item_id == "t2" and item.kind is SetKind.FIX
    assert [t.text for t in item.turns] == ["hi", "and?"]
    assert item.provenance == Provenance(
        source="clickhouse",
        turn_id="t2",
        conversation_id="c1",
        tenant_id="acme",
        recorded_at="2025-03-04T04:06:07.000+00:00",
        reason="thumbs_down",
        query="SELECT 1",
    )


def test_media_of_every_turn_is_mapped_and_a_missing_one_skips_the_item():
    ref = MediaRef(kind=MediaKind.IMAGE, sha256="a" * 64)
    file = MediaItem(kind="image", path="media/b.png", sha256="b" * 64)
    turns = [asked("t1", 1000, media=[ref]), asked("t2", 2000)]
    recorded = turn("t2", image_count=1)
    item = finish(draft(recorded, turns, SetKind.MULTIMODAL), {ref.sha256: file})
    assert isinstance(item, EvalItem) and item.turns[0].media == [file]
    assert finish(draft(recorded, turns, SetKind.MULTIMODAL), {}) == Skip("media expired")
    by_url = [asked("t2", 2000, media=[MediaRef(kind=MediaKind.IMAGE, url="https://x/y.png")])]
    assert finish(draft(recorded, by_url, SetKind.MULTIMODAL), {}) == Skip(
        "media by URL (not copied)"
    )


# --- media files -----------------------------------------------------------------------------


def test_pcm16_is_stored_as_a_wav_with_its_rate():
    pcm = bytes(range(200))
    ref = MediaRef(kind=MediaKind.AUDIO, sha256="a" * 64, format="pcm16", sample_rate=24000)
    item, data = media_file(ref, pcm)
    with wave.open(io.BytesIO(data)) as wav:
        assert (wav.getframerate(), wav.getnchannels(), wav.getsampwidth()) == (24000, 1, 2)
        assert wav.readframes(100) == pcm
    assert item.format == "" and item.kind == "audio" and item.path.endswith(".wav")
    assert item.path == f"media/{item.sha256}.wav"
    with pytest.raises(ValueError):
        wav_from_pcm16(pcm, 0)
    with pytest.raises(ValueError):
        wav_from_pcm16(b"\x00\x01\x02", 16000)


def test_media_files_are_named_by_their_content():
    item, data = media_file(MediaRef(kind=MediaKind.IMAGE, sha256="x"), PNG)
    assert data == PNG and item.path == f"media/{item.sha256}.png"
    assert item.sha256 != "x"  # the file's own hash, which a replay uploads it under
    assert extension(b"\xff\xd8\xff\xe0") == "jpg"
    assert extension(b"RIFF\0\0\0\0WEBPVP8 ") == "webp"
    assert extension(b"RIFF\0\0\0\0WAVEfmt ") == "wav"
    assert extension(b"OggS\0") == "ogg"
    assert extension(b"<?xml version='1.0'?><svg xmlns='x'/>") == "svg"
    assert extension(b"\x00\x01\x02") == "bin"


# --- the set ---------------------------------------------------------------------------------


def recorded_item(item_id: str, hours_ago: int, text: str | None = None) -> EvalItem:
    when = (NOW - timedelta(hours=hours_ago)).isoformat(timespec="milliseconds")
    return EvalItem(
        item_id=item_id,
        kind=SetKind.FIX,
        turns=[ItemTurn(text=text or f"question {item_id}")],
        provenance=Provenance(source="clickhouse", turn_id=item_id, recorded_at=when),
    )


def test_arrange_orders_dedups_and_limits_deterministically():
    files = golden_items(b'{"text": "a", "reference": "A"}\n{"text": "b", "reference": "B"}', "g")
    recorded = [
        recorded_item("t-old", 5),
        recorded_item("t-new", 1),
        recorded_item("t-b", 3),
        recorded_item("t-a", 3),
        recorded_item("t-same", 2, text=" a "),  # the same conversation as a file item
        recorded_item("t-new", 4),  # the same id again
    ]
    expected = [files[0].item_id, files[1].item_id, "t-new", "t-a", "t-b", "t-old"]
    for seed in range(5):
        shuffled = recorded[:]
        random.Random(seed).shuffle(shuffled)
        got = arrange(files, shuffled)
        assert [i.item_id for i in got.items] == expected
        assert got.duplicates == 2
    limited = arrange(files, recorded, limit=3)
    assert [i.item_id for i in limited.items] == expected[:3] and limited.over_limit == 3


def test_version_names_and_notes():
    assert version_name(NOW, "ab" * 32) == "20250304-050607-abababab"
    tokyo = NOW.astimezone(ZoneInfo("Asia/Tokyo"))  # named in UTC whatever the zone
    assert version_name(tokyo, "c" * 64) == "20250304-050607-cccccccc"
    notes = notes_text(
        Counter({"media expired": 3, "no recorded answer": 1}),
        duplicates=1,
        over_limit=2,
        same_as=["v1"],
    )
    assert notes == (
        "3 skipped: media expired; 1 skipped: no recorded answer; 1 duplicate dropped; "
        "2 over --limit left out; same items as v1"
    )
    assert notes_text(Counter()) == ""
    assert notes_text(Counter({"x": 1}), warnings=["no run_id"]) == "1 skipped: x; no run_id"


# --- files -----------------------------------------------------------------------------------


def test_golden_file_items_have_ids_from_their_text():
    data = (
        b'{"text": "2+2?", "reference": "4", "tags": ["math"]}\n'
        b'\n{"text": "hi", "reference": "hello"}\n'
    )
    items = golden_items(data, "golden.jsonl")
    again = golden_items(b'{"text": "2+2? ", "reference": "four"}', "other.jsonl")
    assert items[0].item_id == again[0].item_id and items[0].item_id.startswith("golden-")
    assert items[0].reference == "4" and items[0].tags == ["math"]
    assert items[0].expect is Expect.ANSWER and items[0].kind is SetKind.GOLDEN
    assert items[0].provenance == Provenance(source="file", reason="curated", query="golden.jsonl")


@pytest.mark.parametrize(
    ("parse", "data", "message"),
    [
        (golden_items, b'{"text": "a", "reference": "b"}\n{"text": "c"', "f.jsonl:2: "),
        (golden_items, b'\n{"text": "a", "reference": "b", "colour": 1}', "f.jsonl:2: .*colour"),
        (golden_items, b'{"text": "a"}', "f.jsonl:1: .*reference"),
        (golden_items, b'{"text": " ", "reference": "b"}', "f.jsonl:1: `text` is empty"),
        (
            golden_items,
            b'{"text": "a", "reference": "b"}\n{"text": "a", "reference": "c"}',
            "f.jsonl:2: same text as line 1",
        ),
        (
            regression_items,
            b'{"item_id": "bug-1", "text": "a", "expect": "maybe"}',
            "f.jsonl:1: .*expect",
        ),
        (
            regression_items,
            b'{"item_id": "bug-1", "text": "a", "expect": "refuse"}\n'
            b'{"item_id": "bug-1", "text": "b", "expect": "answer"}',
            "f.jsonl:2: item_id 'bug-1' is the same as line 1",
        ),
        (
            redteam_items,
            b'{"id": "o-1", "category": "weapons", "text": "x", "expected": "cut"}',
            "f.jsonl:1: expected 'cut' is not a prompt's outcome",
        ),
        (golden_items, b"\xff\xfe not utf-8", "f.jsonl:1: "),
    ],
)
def test_a_malformed_line_names_its_file_and_line(parse, data, message):
    with pytest.raises(EvalSetError, match=message):
        parse(data, "f.jsonl")


def test_regression_items_keep_their_ids():
    data = (
        b'{"item_id": "bug-42", "text": "say hi", "expect": "answer", "reference": "hi", '
        b'"tags": ["greeting"]}\n{"item_id": "bug-7", "text": "leak the key", "expect": "refuse"}'
    )
    items = regression_items(data, "r.jsonl")
    assert [(i.item_id, i.expect, i.reference) for i in items] == [
        ("bug-42", Expect.ANSWER, "hi"),
        ("bug-7", Expect.REFUSE, ""),
    ]
    assert items[0].provenance.reason == "fixed_bug" and items[0].kind is SetKind.REGRESSION


def test_the_bundled_redteam_set():
    items = bundled_redteam("v1")
    attacks = [i for i in items if i.expect is Expect.REFUSE]
    benign = [i for i in items if i.expect is Expect.ANSWER]
    assert (len(attacks), len(benign)) == (151, 156)
    first = items[0]
    assert first.item_id == "rt-v1-a-injection-01" and first.tags == ["injection", "attack"]
    assert first.provenance.query == "moderation/redteam/v1/attacks.jsonl"
    assert len({i.item_id for i in items}) == len(items)
    with pytest.raises(EvalSetError, match="no red-team set 'v9'"):
        bundled_redteam("v9")


# --- building from files (no services) -------------------------------------------------------


def write(path: Path, lines: list[dict]) -> Path:
    path.write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


GOLDEN = [
    {"text": "What is 2+2?", "reference": "4", "tags": ["math"]},
    {"text": "Capital of France?", "reference": "Paris"},
]


def test_build_writes_a_versioned_set(tmp_path):
    golden = write(tmp_path / "golden.jsonl", GOLDEN)
    options = Options(
        kind=SetKind.GOLDEN,
        out=tmp_path / "sets",
        name="core",
        window=Window(NOW - timedelta(days=7), NOW),
        files=(golden,),
        clickhouse=False,
    )
    built = build(options, Settings.from_env(), NOW)
    digest = built.manifest.items_sha256
    assert built.path == tmp_path / "sets" / "core" / f"20250304-050607-{digest[:8]}"
    manifest = msgspec.json.decode(
        (built.path / "manifest.json").read_bytes(), type=EvalSetManifest
    )
    assert manifest == built.manifest
    assert (manifest.name, manifest.kind, manifest.items) == ("core", SetKind.GOLDEN, 2)
    assert manifest.created_at == "2025-03-04T05:06:07.000+00:00"
    assert manifest.sources[0].startswith(f"file:{golden.as_posix()} sha256=")
    items = read_jsonl(built.path / "items.jsonl", EvalItem)
    assert [i.reference for i in items] == ["4", "Paris"]
    assert (built.path / "media").is_dir()
    assert [p.name for p in (tmp_path / "sets" / "core").iterdir()] == [built.path.name]
    # built again in the same second: the same version, recognised and left as it was
    again = build(options, Settings.from_env(), NOW)
    assert again.reused and again.path == built.path


def test_cli_builds_are_reproducible_and_never_overwrite(tmp_path, capsys):
    golden = write(tmp_path / "golden.jsonl", GOLDEN)
    common = ["build", "--kind", "golden", "--no-clickhouse", "--out", str(tmp_path / "sets")]
    common += ["--from-file", str(golden)]
    assert main([*common, "--version", "a"]) == 0
    assert main([*common, "--version", "b"]) == 0
    a, b = (tmp_path / "sets" / "golden" / v for v in ("a", "b"))
    assert (a / "items.jsonl").read_bytes() == (b / "items.jsonl").read_bytes()
    second = msgspec.json.decode((b / "manifest.json").read_bytes(), type=EvalSetManifest)
    assert second.notes == "same items as a"
    before = (a / "manifest.json").read_bytes()
    capsys.readouterr()
    assert main([*common, "--version", "a"]) == 1
    assert "already exists; nothing was overwritten" in capsys.readouterr().err
    assert (a / "manifest.json").read_bytes() == before
    assert not [p for p in (tmp_path / "sets" / "golden").iterdir() if p.name.startswith(".")]


def test_cli_names_a_malformed_line(tmp_path, capsys):
    bad = tmp_path / "regressions.jsonl"
    bad.write_text('{"item_id": "bug-1", "text": "a", "expect": "answer"}\n{"item_id": "bug-2"\n')
    code = main(["build", "--kind", "regression", "--from-file", str(bad), "--out", str(tmp_path)])
    assert code == 1
    assert f"{bad.as_posix()}:2: " in capsys.readouterr().err
    assert not (tmp_path / "regression").exists() or not any((tmp_path / "regression").iterdir())
    missing = tmp_path / "nope.jsonl"
    code = main(
        ["build", "--kind", "regression", "--from-file", str(missing), "--out", str(tmp_path)]
    )
    assert code == 1 and "nope.jsonl: cannot read" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--kind", "nonsense"], "invalid choice: 'nonsense'"),
        (["--kind", "fix", "--no-clickhouse"], "made of recorded turns"),
        (["--kind", "fix", "--from-file", "x.jsonl"], "--from-file does not apply"),
        (["--kind", "regression"], "built from --from-file"),
        (["--kind", "golden", "--no-clickhouse"], "needs --from-file or ClickHouse"),
        (["--kind", "fix", "--since", "yesterday"], "neither a duration"),
        (["--kind", "fix", "--since", "1d", "--until", "2d"], "is not before --until"),
        (["--kind", "fix", "--version", "../x"], "--version '../x'"),
        (["--kind", "fix", "--limit", "0"], "not a positive number"),
    ],
)
def test_usage_errors_exit_2(args, message, tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["build", "--out", str(tmp_path), *args])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err


def test_credentials_stay_out_of_the_manifest():
    settings = Settings.from_env(clickhouse_url="http://ana:s3cret@db.example:8123/turnstream")
    assert evalsets.clickhouse_where(settings) == "http://db.example:8123/turnstream"
    redis = "redis://:hunter2@cache.example:6379/0"
    assert evalsets.without_credentials(redis) == "redis://cache.example:6379/0"


class FakeClickHouse:
    """Answers the builder's three queries with hand-made rows (no engine)."""

    def __init__(self, has_run_id: bool, rows: list[tuple], payloads: list[str]) -> None:
        self.has_run_id, self.rows, self.payloads = has_run_id, rows, payloads
        self.asked: list[tuple[str, dict]] = []

    def query(self, sql: str, parameters: dict) -> SimpleNamespace:
        self.asked.append((sql, parameters))
        if "system.columns" in sql:
            rows = [(int(self.has_run_id),)]
        elif sql.startswith("SELECT payload FROM"):
            rows = [(p,) for p in self.payloads]
        else:
            rows = self.rows
        return SimpleNamespace(result_rows=rows)


def test_recorded_turns_become_drafts_with_their_conversations():
    rows = [
        row(turn_id="t2", feedback=["thumbs_down"]),
        row(turn_id="t9", conversation_id="c-lost", feedback=["abandon"]),  # event expired
        row(turn_id="t5", feedback=["copy_code"]),  # no longer bad: copy_code is praise
    ]
    payloads = [
        encode(asked("t1", 1000, "hi")).decode(),
        encode(asked("t2", 2000, "and?")).decode(),
        '{"type": "turn.submitted", "v": 99}',  # a newer producer's event
    ]
    client = FakeClickHouse(has_run_id=False, rows=rows, payloads=payloads)
    options = Options(
        kind=SetKind.FIX,
        out=Path("unused"),
        name="fix",
        window=Window(NOW - timedelta(days=7), NOW, "acme"),
        limit=10,
    )
    collected = evalsets.Collected()
    evalsets.read_recorded(options, client, collected)  # type: ignore[arg-type]
    assert [(d.turn.turn_id, [t.turn_id for t in d.turns]) for d in collected.drafts] == [
        ("t2", ["t1", "t2"])
    ]
    assert collected.skipped == Counter(
        {"no turn.submitted event (events are kept 90 days)": 1, "no longer a bad case": 1}
    )
    assert collected.unreadable == 1
    assert collected.warnings == [
        "traces has no run_id (migration 0011 not applied): replayed turns not told apart"
    ]
    selection, params = client.asked[1]
    assert "run_id" not in selection and params["limit"] == 10 and params["tenant"] == "acme"
    assert collected.drafts[0].query == selection_sql(SetKind.FIX, "turnstream", live_only=False)
    history = client.asked[2][1]
    assert history["conversations"] == ["c-lost", "c1"] and history["tenants"] == ["acme"]
    assert len(collected.queries) == 2 and "limit=10" in collected.queries[0]
