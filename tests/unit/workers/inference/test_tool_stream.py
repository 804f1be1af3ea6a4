"""Which pieces of a streamed answer are tool calls, whatever the deltas' boundaries."""

from __future__ import annotations

import itertools

from hypothesis import given
from hypothesis import strategies as st

from workers.inference.tool_stream import TEXT, CallSplitter

ANSWER = (
    'Sure.<tool_call>{"name":"a","arguments":{}}</tool_call> then<tool_call>{"x":1}</tool_call>!'
)


def joined(pieces):
    out: dict[int, str] = {}
    for index, text in pieces:
        out[index] = out.get(index, "") + text
    return out


def test_text_and_calls_apart_in_one_delta():
    splitter = CallSplitter(whole=False)
    assert joined(splitter.push(ANSWER) + splitter.flush()) == {
        TEXT: "Sure. then!",
        0: '{"name":"a","arguments":{}}',
        1: '{"x":1}',
    }


@given(st.lists(st.integers(1, len(ANSWER) - 1), max_size=12, unique=True))
def test_tags_split_anywhere_across_deltas_are_never_shown(cuts):
    bounds = [0, *sorted(cuts), len(ANSWER)]
    splitter = CallSplitter(whole=False)
    pieces = []
    for a, b in itertools.pairwise(bounds):
        pieces += splitter.push(ANSWER[a:b])
    pieces += splitter.flush()
    assert joined(pieces) == joined(CallSplitter(whole=False).push(ANSWER))
    assert all("<" not in text for index, text in pieces if index == TEXT)


def test_a_tag_that_never_finishes_is_shown_at_the_end_and_whole_mode_is_all_call():
    splitter = CallSplitter(whole=False)
    assert splitter.push("a <tool_ca") == [(TEXT, "a ")]
    assert splitter.flush() == [(TEXT, "<tool_ca")]
    assert CallSplitter(whole=True).push('{"name"') == [(0, '{"name"')]
