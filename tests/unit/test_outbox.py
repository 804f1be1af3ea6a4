import pytest

from ws_edge.outbox import Outbox, OutboxOverflow


async def test_outbox_hands_over_everything_queued_in_order():
    box = Outbox(limit=3)
    box.put("a")
    box.put("b")
    assert await box.take_all() == ["a", "b"]
    box.put("c")
    assert await box.take_all() == ["c"]


def test_a_client_too_far_behind_overflows_instead_of_growing_memory():
    box = Outbox(limit=2)
    box.put("a")
    box.put("b")
    with pytest.raises(OutboxOverflow, match="2 frames"):
        box.put("c")
    box.closed = True
    box.put("d")  # after close, frames are dropped silently
    assert len(box) == 2


async def test_bytes_behind_count_too_and_drain_with_the_frames():
    box = Outbox(limit=100, limit_bytes=10)
    box.put("x" * 6)
    with pytest.raises(OutboxOverflow, match="6 bytes"):
        box.put("y" * 5)  # a few frames, but too many bytes
    assert await box.take_all() == ["x" * 6] and box.queued_bytes == 0
    box.put("y" * 10)  # room again once the writer took them
