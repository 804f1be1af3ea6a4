"""The inference worker's speech feed: the shown answer cut into pieces for the TTS worker."""

from __future__ import annotations

from harness.factories import submitted
from schemas.events import FinishReason, SpeechSettings, SpeechText
from workers.inference.speech.feed import SpeechFeed
from workers.inference.speech.segments import SegmenterConfig

ANSWER = "Hello there, my friend. How are you doing today? I am fine, thanks"


class Recorder:
    def __init__(self) -> None:
        self.sent: list[SpeechText] = []

    async def __call__(self, piece: SpeechText) -> None:
        self.sent.append(piece)


def make_feed(voice: str = "espeak", attempt: str = "att-2") -> tuple[SpeechFeed, Recorder]:
    sent = Recorder()
    feed = SpeechFeed(
        turn=submitted("t1", conversation_id="c1", edge_id="edge-3"),
        speech=SpeechSettings(voice=voice),
        attempt=attempt,
        segments=SegmenterConfig(),
        send=sent,
        clock_ms=lambda: 42.0,
    )
    return feed, sent


async def show_in_deltas(feed: SpeechFeed, text: str, size: int = 3) -> None:
    for i in range(0, len(text), size):
        await feed.shown(text[i : i + size])


def summary(pieces: list[SpeechText]) -> list[tuple]:
    return [(p.index, p.text, p.char_start, p.final, p.finish_reason) for p in pieces]


async def test_pieces_stream_as_the_text_is_shown():
    feed, sent = make_feed()
    await show_in_deltas(feed, ANSWER)
    assert summary(sent.sent) == [
        (0, "Hello there, ", 0, False, None),
        (1, "my friend. ", 13, False, None),
        (2, "How are you doing today? ", 24, False, None),
        (3, "I am fine, ", 49, False, None),
    ]
    for p in sent.sent:
        assert ANSWER[p.char_start : p.char_start + len(p.text)] == p.text
        assert (p.turn_id, p.conversation_id, p.edge_id) == ("t1", "c1", "edge-3")
        assert (p.voice, p.attempt, p.sent_at_ms) == ("espeak", "att-2", 42.0)
    assert not feed.finished


async def test_finish_stop_flushes_the_rest_as_the_final_piece():
    feed, sent = make_feed()
    await show_in_deltas(feed, ANSWER)
    await feed.finish(FinishReason.STOP)
    assert feed.finished
    assert len(sent.sent) == 5
    last = sent.sent[-1]
    assert summary([last]) == [(4, "thanks", 60, True, FinishReason.STOP)]
    assert (last.voice, last.attempt) == ("espeak", "att-2")
    assert "".join(p.text for p in sent.sent) == ANSWER
    assert [p.final for p in sent.sent] == [False, False, False, False, True]


async def test_finish_length_also_speaks_to_the_end():
    feed, sent = make_feed()
    await show_in_deltas(feed, ANSWER)
    await feed.finish(FinishReason.LENGTH)
    assert summary(sent.sent[-1:]) == [(4, "thanks", 60, True, FinishReason.LENGTH)]


async def test_finish_cancelled_drops_the_unsent_rest():
    feed, sent = make_feed()
    await show_in_deltas(feed, ANSWER)
    await feed.finish(FinishReason.CANCELLED)
    assert len(sent.sent) == 5
    # "thanks" was shown but not sent: dropped; the final piece is empty, where speech ended
    assert summary(sent.sent[-1:]) == [(4, "", 60, True, FinishReason.CANCELLED)]


async def test_finish_cancelled_mid_piece_starts_at_the_characters_sent():
    feed, sent = make_feed()
    await feed.shown("Hello there, my fri")  # "Hello there, " sent, "my fri" pending
    assert summary(sent.sent) == [(0, "Hello there, ", 0, False, None)]
    await feed.finish(FinishReason.CANCELLED)
    assert summary(sent.sent[1:]) == [(1, "", 13, True, FinishReason.CANCELLED)]


async def test_finish_with_nothing_shown_sends_an_empty_final():
    feed, sent = make_feed()
    await feed.finish(FinishReason.ERROR)
    assert summary(sent.sent) == [(0, "", 0, True, FinishReason.ERROR)]


async def test_halt_then_finish_stop_sends_only_an_empty_final():
    feed, sent = make_feed()
    await feed.shown("Hello there, my friend")
    assert len(sent.sent) == 1
    feed.halt()
    await feed.shown(". How are you doing today? I am fine")  # shown, never spoken
    assert len(sent.sent) == 1
    await feed.finish(FinishReason.STOP)
    assert summary(sent.sent[1:]) == [(1, "", 13, True, FinishReason.STOP)]


async def test_finish_twice_sends_one_final():
    feed, sent = make_feed()
    await show_in_deltas(feed, ANSWER)
    await feed.finish(FinishReason.STOP)
    await feed.finish(FinishReason.STOP)
    await feed.finish(FinishReason.CANCELLED)
    assert [p.final for p in sent.sent].count(True) == 1
    assert len(sent.sent) == 5


async def test_text_shown_after_finish_is_not_spoken():
    feed, sent = make_feed()
    await feed.finish(FinishReason.STOP)
    await feed.shown("Too late, this is not spoken at all. ")
    assert summary(sent.sent) == [(0, "", 0, True, FinishReason.STOP)]
