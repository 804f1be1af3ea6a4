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
    with pytest.raises(OutboxOverflow, match="2 frames behind"):
        box.put("c")
    box.closed = True
    box.put("d")  # after close, frames are dropped silently
    assert len(box) == 2
