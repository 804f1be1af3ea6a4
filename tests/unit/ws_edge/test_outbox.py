import pytest

from ws_edge.messages import ResponseDelta, server_decoder
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


async def test_deltas_of_a_turn_coalesce_while_the_writer_is_behind():
    box = Outbox(limit=100)
    for seq, text in enumerate(["Hel", "lo", " there"]):
        box.put_delta(ResponseDelta("t1", seq, text))
    box.put_delta(ResponseDelta("t2", 0, "Other"))  # another turn: its own frame
    box.put_delta(ResponseDelta("t1", 3, "!"))  # not merged across t2's frame: order holds
    frames = [server_decoder.decode(f) for f in await box.take_all()]
    assert frames == [
        ResponseDelta("t1", 0, "Hello there"),
        ResponseDelta("t2", 0, "Other"),
        ResponseDelta("t1", 3, "!"),
    ]
    assert box.coalesced == 2 and box.queued_bytes == 0


async def test_a_reader_that_keeps_up_gets_every_delta():
    box = Outbox(limit=100)
    box.put_delta(ResponseDelta("t1", 0, "a"))
    assert [server_decoder.decode(f) for f in await box.take_all()] == [ResponseDelta("t1", 0, "a")]
    box.put_delta(ResponseDelta("t1", 1, "b"))  # the writer took the first: nothing to join
    assert [server_decoder.decode(f) for f in await box.take_all()] == [ResponseDelta("t1", 1, "b")]
    assert box.coalesced == 0


async def test_a_delta_after_another_frame_or_a_drop_is_not_merged():
    box = Outbox(limit=100)
    box.put_delta(ResponseDelta("t1", 0, "a"))
    box.put('{"type":"pong"}')
    box.put_delta(ResponseDelta("t1", 1, "b"))
    box.put("audio", tag="t1")
    box.drop("t1")
    box.put_delta(ResponseDelta("t1", 2, "c"))
    kinds = [f for f in await box.take_all()]
    assert len(kinds) == 4 and box.coalesced == 0


async def test_coalescing_keeps_the_byte_bound():
    box = Outbox(limit=100, limit_bytes=120)
    box.put_delta(ResponseDelta("t1", 0, "x" * 40))
    with pytest.raises(OutboxOverflow):
        for seq in range(1, 10):
            box.put_delta(ResponseDelta("t1", seq, "y" * 20))
    assert box.queued_bytes <= 120
    [frame] = await box.take_all()
    assert server_decoder.decode(frame).text.startswith("x" * 40)
