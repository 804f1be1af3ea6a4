"""The pure parts of the connection benchmark (`bench/connections.py`): stamps in token texts,
joined deltas, continuity, the window, the rows and ratios, the profile summary."""

import math
from array import array

import pytest

from bench.connections.run import summarize_profile
from bench.connections.stats import (
    Continuity,
    Recorder,
    Window,
    delivery_stats,
    merge_reports,
    parse_stamps,
    phases_for,
    quantiles,
    ratio,
    split,
    stream_rate,
    token_text,
    versus,
)


def test_a_token_carries_its_index_and_publish_time():
    text = token_text(7, 1732890000123.44)
    assert text == " 7@1732890000123.4"
    assert parse_stamps(text) == [(7, 1732890000123.4)]


def test_a_joined_delta_holds_every_token_of_its_frames():
    joined = token_text(3, 1000.0) + token_text(4, 1050.5) + token_text(5, 1100.25)
    assert parse_stamps(joined) == [(3, 1000.0), (4, 1050.5), (5, 1100.2)]
    assert parse_stamps("") == []


def test_continuity_counts_gaps_and_duplicates():
    check = Continuity()
    for index in (0, 1, 2):
        check.feed(index)
    assert check.clean and check.next_index == 3
    check.feed(5)  # 3 and 4 never came
    check.feed(5)  # 5 again
    check.feed(6)
    assert (check.gaps, check.duplicates, check.next_index) == (2, 1, 7)
    assert not check.clean


def test_the_recorder_counts_each_token_of_a_joined_frame_and_its_own_delay():
    recorder = Recorder(window=Window(1000.0, 2000.0))
    check = Continuity()
    before = recorder.delta(990.0, token_text(0, 980.0), check)  # before the window
    joined = token_text(1, 1000.0) + token_text(2, 1040.0)
    inside = recorder.delta(1050.0, joined, check)
    recorder.delta(2000.0, token_text(3, 1990.0), check)  # the window's end is excluded
    assert (before, inside) == (1, 2)
    assert (recorder.frames, recorder.tokens) == (1, 2)
    assert (recorder.total_frames, recorder.total_tokens) == (3, 4)
    assert list(recorder.delays) == [50.0, 10.0]
    assert check.clean


def test_reports_of_several_processes_merge():
    a, b = Recorder(window=Window(0, 100)), Recorder(window=Window(0, 100))
    a.delta(10.0, token_text(0, 5.0), Continuity())
    b.delta(20.0, token_text(0, 18.0) + token_text(1, 19.0), Continuity())
    merged = merge_reports([a.report(), b.report()])
    assert merged["tokens"] == 3 and merged["frames"] == 2
    assert sorted(merged["delays"]) == [1.0, 2.0, 5.0]


def test_delivery_stats_isolate_the_edges_added_delay():
    received = {"tokens": 300, "frames": 200, "delays": [10.0] * 99 + [50.0]}
    direct = [2.0] * 99 + [8.0]
    stats = delivery_stats(received, 10.0, direct)
    assert stats["tokens_per_s"] == 30 and stats["frames_per_s"] == 20
    assert stats["tokens_per_frame"] == 1.5
    assert stats["added_p50_ms"] == pytest.approx(8.0)
    assert stats["added_p99_ms"] == pytest.approx(
        stats["delay_ms"]["p99"] - stats["direct_delay_ms"]["p99"]
    )


def test_a_run_against_the_baseline_run_is_a_ratio():
    def row(*values):
        n, tokens, p99, added, rss, us, resume = values
        return {
            "connections": n,
            "tokens_per_s": tokens,
            "delay_ms": {"p99": p99},
            "added_p99_ms": added,
            "rss_kb_per_conn": rss,
            "edge_cpu_us_per_token": us,
            "resume_ms": {"p99": resume},
        }

    base = row(1000, 20_000, 10.0, 5.0, 20.0, 40.0, 100.0)
    big = row(10_000, 30_000, 100.0, 90.0, 18.0, 50.0, 400.0)
    vs = versus(big, base)
    assert vs["connections"] == 10 and vs["tokens_per_s"] == 1.5
    assert vs["delay_p99"] == 10 and vs["added_p99"] == 18
    assert vs["rss_per_connection"] == 0.9 and vs["edge_cpu_us_per_token"] == 1.25
    assert vs["resume_p99"] == 4


def test_ratio_of_unknowns_is_nan():
    assert ratio(3.0, 2.0) == 1.5
    assert math.isnan(ratio(1.0, 0.0))
    assert math.isnan(ratio(math.nan, 1.0))


def test_split_shares_and_quantiles():
    assert split(10_000, 2) == [5000, 5000]
    assert split(7, 3) == [3, 2, 2]
    assert split(200, 1) == [200]
    assert quantiles([3.0, 1.0, 2.0], 3) == [1.0, 2.0, 3.0]
    assert quantiles([], 5) == []


def test_the_profile_summary_shares_samples_by_leaf_and_by_file():
    lines = [
        "main (ws_edge/server.py:10);send (/x/site-packages/websockets/protocol.py:5) 6",
        "main (ws_edge/server.py:10);relay (ws_edge/relay.py:3) 4",
        "garbage",
    ]
    profile = summarize_profile(lines)
    assert profile["samples"] == 10
    assert profile["self"][0] == ("send (websockets/protocol.py)", 0.6)
    files = dict(profile["inclusive_by_file"])
    assert files["ws_edge/server.py"] == 1.0 and files["ws_edge/relay.py"] == 0.4
    assert summarize_profile([]) == {}


def test_recorder_report_round_trips_delays_as_bytes():
    recorder = Recorder(window=Window(0, 10))
    recorder.delta(5.0, token_text(0, 4.5), Continuity())
    restored = array("d")
    restored.frombytes(recorder.report()["delays"])
    assert list(restored) == [0.5]


def test_the_offered_load_is_capped_across_streams():
    assert stream_rate(1000, 20.0, 5000.0) == 5.0
    assert stream_rate(10_000, 20.0, 5000.0) == 0.5
    assert stream_rate(100, 20.0, 5000.0) == 20.0  # under the cap: as asked
    assert stream_rate(10_000, 20.0, 0.0) == 20.0  # no cap


def test_the_pumps_steps_are_as_big_at_any_per_stream_rate():
    assert phases_for(20.0, 200) == 10
    assert phases_for(5.0, 200) == 40
    assert phases_for(0.5, 200) == 400
    assert phases_for(1000.0, 200) == 1
