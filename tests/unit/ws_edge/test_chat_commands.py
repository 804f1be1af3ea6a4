"""The terminal chat's media commands (parsing only; the turns are tested end to end)."""

import wave
from base64 import b64decode

import pytest

from infra.chat import media_command, save_speech, speak_command
from ws_edge.messages import AudioPart, ImagePart


def test_plain_text_is_not_a_command():
    assert media_command("hello /image") is None


def test_image_from_a_file_and_from_a_url(tmp_path):
    picture = tmp_path / "cat.png"
    picture.write_bytes(b"\x89PNG...")
    text, [part] = media_command(f"/image {picture} what is this?")
    assert text == "what is this?" and isinstance(part, ImagePart)
    assert b64decode(part.data) == b"\x89PNG..."
    _, [by_url] = media_command("/image https://example.com/cat.png")
    assert by_url.url == "https://example.com/cat.png" and by_url.data is None


def test_audio_from_a_file(tmp_path):
    clip = tmp_path / "q.webm"
    clip.write_bytes(b"\x1aE\xdf\xa3")
    text, [part] = media_command(f"/audio {clip}")
    assert text == "" and isinstance(part, AudioPart) and part.format is None


@pytest.mark.parametrize(("line", "says"), [("/image", "usage"), ("/audio nope.wav", "no file")])
def test_bad_commands_explain_themselves(line, says):
    with pytest.raises(ValueError, match=says):
        media_command(line)


def test_speak_command():
    assert speak_command("/speak") == "joe"
    assert speak_command("/speak espeak") == "espeak"
    assert speak_command("/speak off") == ""
    assert speak_command("speak to me") is None
    with pytest.raises(ValueError, match="usage"):
        speak_command("/speak joe loudly")


def test_saved_speech_is_a_wav_of_the_pcm(tmp_path):
    pcm = bytes(range(256)) * 10
    path = save_speech(tmp_path / "speech", "t1", pcm, 22050)
    with wave.open(str(path)) as w:
        assert (w.getnchannels(), w.getsampwidth(), w.getframerate()) == (1, 2, 22050)
        assert w.readframes(w.getnframes()) == pcm
