"""Media in `turn.create` and `audio.append`, at the level of the pure session."""

from base64 import b64encode

from runtime.blobs import sha256_hex
from schemas.events import InputTranscribed, MediaKind, TranscriptSegment
from tests.unit.ws_edge.test_session import SECRET, authed, frame, only_error
from ws_edge.actions import Send, SubmitTurn
from ws_edge.auth import mint_token
from ws_edge.media import MediaLimits
from ws_edge.messages import InputTranscript
from ws_edge.session import Session, SessionLimits

PNG = b"\x89PNG\r\n\x1a\n fake but the edge does not decode"


def b64(data: bytes) -> str:
    return b64encode(data).decode()


def media_session(**media) -> Session:
    limits = SessionLimits(max_message_bytes=200, media=MediaLimits(**media))
    session = Session(
        session_id="s1", edge_id="e1", auth_secret=SECRET, limits=limits, clock_ms=lambda: 1.0
    )
    session.open(mint_token(SECRET, "alice", "acme"))
    return session


def create(session, **fields):
    return session.receive(frame(type="turn.create", conversation_id="c", **fields))


def append(session, stream_id: str, data: bytes):
    return session.receive(frame(type="audio.append", stream_id=stream_id, data=b64(data)))


def from_stream(stream_id: str) -> list[dict]:
    return [{"type": "audio", "stream_id": stream_id}]


def test_inline_image_becomes_a_reference_and_an_upload():
    session = authed()
    [submit] = create(session, text="what is this?", parts=[{"type": "image", "data": b64(PNG)}])
    assert isinstance(submit, SubmitTurn)
    [ref] = submit.turn.media
    assert ref.kind == MediaKind.IMAGE and ref.sha256 == sha256_hex(PNG)
    assert ref.size_bytes == len(PNG)
    assert [(u.key, u.data) for u in submit.uploads] == [(sha256_hex(PNG), PNG)]
    assert submit.turn.text == "what is this?"


def test_image_by_url_is_not_uploaded_and_must_be_https():
    session = authed()
    [submit] = create(session, parts=[{"type": "image", "url": "https://example.com/a.png"}])
    assert submit.turn.media[0].url == "https://example.com/a.png" and submit.uploads == ()
    err = only_error(create(session, parts=[{"type": "image", "url": "http://example.com/a"}]))
    assert err.code == "invalid_message" and "https" in err.message
    err = only_error(create(session, parts=[{"type": "image", "url": "file:///etc/passwd"}]))
    assert "https" in err.message


def test_text_parts_join_the_text_in_order():
    [submit] = create(authed(), text="a", parts=[{"type": "text", "text": "b"}])
    assert submit.turn.text == "a\nb"


def test_bad_media_gets_precise_errors():
    session = authed()
    cases = {
        "not valid base64": [{"type": "image", "data": "%%%not-base64"}],
        "exactly one of `data` or `url`": [{"type": "image"}],
        "the image is empty": [{"type": "image", "data": ""}],
        "needs `sample_rate`": [{"type": "audio", "data": b64(b"\x00\x00"), "format": "pcm16"}],
        "odd number of bytes": [
            {"type": "audio", "data": b64(b"\x00"), "format": "pcm16", "sample_rate": 16000}
        ],
        "at most one audio part": [
            {"type": "audio", "data": b64(b"RIFF")},
            {"type": "audio", "data": b64(b"RIFF")},
        ],
        "is empty: send audio.append first": [{"type": "audio", "stream_id": "mic"}],
        "Invalid value 'video'": [{"type": "video", "data": "x"}],
    }
    for expected, parts in cases.items():
        err = only_error(create(session, parts=parts))
        assert expected in err.message, (expected, err.message)
        assert err.code == "invalid_message"
    assert "a turn needs text" in only_error(create(session)).message


def test_limits_on_count_and_bytes():
    session = media_session(max_images=2, max_media_bytes=100)
    err = only_error(create(session, parts=[{"type": "image", "data": b64(PNG)}] * 3))
    assert err.code == "media_too_large" and "3 images" in err.message
    err = only_error(create(session, parts=[{"type": "image", "data": b64(b"x" * 101)}]))
    assert err.code == "media_too_large" and "101 bytes" in err.message


def test_large_media_messages_pass_the_small_message_limit_but_others_do_not():
    session = media_session()
    [submit] = create(session, parts=[{"type": "image", "data": b64(b"y" * 500)}])
    assert isinstance(submit, SubmitTurn)
    err = only_error(session.receive(frame(type="ping", id="p", pad="z" * 300)))
    assert err.code == "message_too_large"


def test_streamed_audio_is_buffered_and_taken_by_one_turn():
    session = authed()
    for piece in (b"\x01\x00" * 10, b"\x02\x00" * 5):
        assert append(session, "mic", piece) == []
    [submit] = create(session, parts=from_stream("mic"))
    [ref] = submit.turn.media
    assert ref.kind == MediaKind.AUDIO and ref.format == "pcm16" and ref.sample_rate == 16000
    assert submit.uploads[0].data == b"\x01\x00" * 10 + b"\x02\x00" * 5
    err = only_error(create(session, parts=from_stream("mic")))
    assert "is empty" in err.message  # taken: the next turn cannot reuse it


def test_a_refused_turn_leaves_the_audio_buffer_for_a_corrected_retry():
    session = media_session(max_text_chars=5)
    session.receive(frame(type="audio.append", stream_id="mic", data=b64(b"\x00\x00")))
    err = only_error(
        create(session, text="far too long", parts=[{"type": "audio", "stream_id": "mic"}])
    )
    assert err.code == "invalid_message"
    [submit] = create(session, parts=[{"type": "audio", "stream_id": "mic"}])
    assert submit.uploads[0].data == b"\x00\x00"


def test_audio_buffer_overflow_and_clear():
    session = media_session(max_audio_buffer_bytes=8)
    assert session.receive(frame(type="audio.append", stream_id="m", data=b64(b"\x00" * 6))) == []
    err = only_error(
        session.receive(frame(type="audio.append", stream_id="m", data=b64(b"\x00" * 4)))
    )
    assert err.code == "media_too_large" and "cleared" in err.message
    session.receive(frame(type="audio.append", stream_id="m", data=b64(b"\x00\x00")))
    assert session.receive(frame(type="audio.clear", stream_id="m")) == []
    assert (
        "is empty"
        in only_error(create(session, parts=[{"type": "audio", "stream_id": "m"}])).message
    )


def test_transcript_is_relayed_once_the_turn_is_accepted():
    session = authed()
    [submit] = create(session, parts=[{"type": "audio", "data": b64(b"RIFFxxxx")}])
    turn_id = submit.turn.turn_id
    segments = [TranscriptSegment(0.5, 1.5, "hello there")]
    heard = InputTranscribed(turn_id=turn_id, text="hello there", segments=segments, audio_s=2.0)
    assert session.relay(heard) == []  # held until turn.accepted
    _accepted, transcript = session.submit_succeeded(turn_id)
    assert transcript == Send(InputTranscript(turn_id, "hello there", segments, 2.0))


def test_an_audio_parts_language_hint_rides_on_its_reference():
    session = authed()
    append(session, "mic", b"\x01\x00" * 10)
    [submit] = create(session, parts=[{"type": "audio", "stream_id": "mic", "language": "zh"}])
    assert submit.turn.media[0].language == "zh"
    [submit] = create(authed(), parts=[{"type": "audio", "data": b64(b"RIFFxxxx")}])
    assert submit.turn.media[0].language == ""  # no hint: the ASR detects it
    for bad in ("Chinese", "ZH", "z"):
        part = {"type": "audio", "data": b64(b"RIFFxxxx"), "language": bad}
        assert only_error(create(authed(), parts=[part])).code == "invalid_message"


def test_the_heard_language_reaches_the_client_with_the_transcript():
    session = authed()
    [submit] = create(session, parts=[{"type": "audio", "data": b64(b"RIFFxxxx")}])
    turn_id = submit.turn.turn_id
    heard = InputTranscribed(turn_id=turn_id, text="hola", segments=[], audio_s=1.0, language="es")
    session.relay(heard)
    _accepted, transcript = session.submit_succeeded(turn_id)
    assert transcript.event.language == "es"
