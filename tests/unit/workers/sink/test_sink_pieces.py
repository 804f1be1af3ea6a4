"""The sink's pure pieces: batches and their offsets/tokens, and the row checks."""

from __future__ import annotations

import pytest
from aiokafka import TopicPartition

from harness.factories import completed
from schemas.events import ErrorInfo, FinishReason, Timings, Usage
from schemas.ids import now_ms
from workers.sink.batch import Batch, BatchLimits
from workers.sink.rows import TURN_COLUMNS, RowRejected, turn_row

A, B = TopicPartition("t", 0), TopicPartition("t", 1)


def test_a_batch_covers_the_offsets_it_consumed_and_names_them():
    batch = Batch(opened_at=0.0)
    for tp, offset in [(A, 5), (B, 9), (A, 6), (A, 7)]:
        batch.consumed(tp, offset)
    batch.add(("row",), 10)
    assert batch.commit_offsets() == {A: 8, B: 10}
    assert batch.token() == "t:0:5-7,t:1:9-9"
    again = Batch(opened_at=1.0)
    for tp, offset in [(B, 9), (A, 5), (A, 7)]:
        again.consumed(tp, offset)
    assert again.token() == batch.token()  # the same records → the same token


def test_a_batch_is_due_when_full_or_old():
    limits = BatchLimits(max_rows=2, max_bytes=100, linger_s=1.0)
    batch = Batch(opened_at=0.0)
    assert not batch.due(limits, 5.0)  # nothing consumed: nothing to flush
    batch.consumed(A, 1)
    batch.add(("r",), 10)
    assert not batch.due(limits, 0.5) and batch.due(limits, 1.0)
    batch.add(("r",), 10)
    assert batch.due(limits, 0.0)
    big = Batch(opened_at=0.0)
    big.consumed(A, 1)
    big.add(("r",), 100)
    assert big.due(limits, 0.0)


def test_a_turn_row_in_column_order():
    error = ErrorInfo("no_speech", "silence")
    event = completed(
        "t1",
        finish_reason=FinishReason.ERROR,
        error=error,
        usage=Usage(3, 0),
        timings=Timings(queue_ms=1, ttft_ms=None, e2e_ms=2, itl_ms=[]),
        completed_at_ms=now_ms(),
    )
    row = dict(zip(TURN_COLUMNS, turn_row(event, now_ms=now_ms()), strict=True))
    assert row["turn_id"] == "t1" and row["finish_reason"] == "error"
    assert row["error_code"] == "no_speech" and row["ttft_ms"] is None


@pytest.mark.parametrize(
    ("fields", "says"),
    [
        ({"timings": Timings(queue_ms=-1, ttft_ms=1, e2e_ms=1)}, "negative latency"),
        ({"timings": Timings(queue_ms=1, ttft_ms=1, e2e_ms=1, itl_ms=[-2.0])}, "negative"),
        ({"usage": Usage(-1, 0)}, "negative token count"),
        ({"text": "x" * (1024 * 1024 + 1)}, "text over"),
        ({"completed_at_ms": 1000.0}, "plausible time"),
    ],
)
def test_absurd_values_are_rejected_with_the_reason(fields, says):
    event = completed("t", **{"completed_at_ms": now_ms(), **fields})
    with pytest.raises(RowRejected, match=says):
        turn_row(event, now_ms=now_ms())
