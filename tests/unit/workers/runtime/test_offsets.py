from workers.runtime.offsets import OffsetTracker


def test_commits_stop_at_the_oldest_unfinished_message():
    tracker: OffsetTracker[str] = OffsetTracker()
    for offset in (10, 11, 12):
        tracker.started("p0", offset)
    tracker.finished("p0", 11)
    tracker.finished("p0", 12)
    assert tracker.committable() == {"p0": 10}  # 10 still running: commit nothing past it
    tracker.mark_committed({"p0": 10})
    assert tracker.committable() == {}
    tracker.finished("p0", 10)
    assert tracker.committable() == {"p0": 13}


def test_partitions_are_independent_and_revocation_forgets():
    tracker: OffsetTracker[str] = OffsetTracker()
    tracker.started("a", 0)
    tracker.started("b", 5)
    tracker.finished("b", 5)
    assert tracker.committable() == {"a": 0, "b": 6}
    tracker.forget(["a"])
    assert tracker.committable() == {"b": 6}
    assert tracker.in_flight() == 0
