"""Which node a cluster fault strikes (`bench/faults/cluster.py`, pure parts): the leader of
the busiest partitions, passing over the controller, and the controller by Raft state."""

import pytest

from bench.faults.cluster import ClusterError, Partition, busiest_leader, controller_of


def part(topic: str, n: int, leader: int, records: int, isr=(1, 2, 3)) -> Partition:
    return Partition(topic, n, leader, (1, 2, 3), tuple(isr), records)


def test_the_busiest_leader_leads_the_most_records_not_the_most_partitions():
    partitions = [part("a", 0, 1, 10), part("a", 1, 1, 10), part("a", 2, 2, 500)]
    assert busiest_leader(partitions) == (2, 1, 500)


def test_the_controller_is_passed_over_so_its_loss_stays_a_fault_of_its_own():
    partitions = [part("a", 0, 1, 900), part("a", 1, 2, 50), part("a", 2, 3, 10)]
    assert busiest_leader(partitions, avoid=1) == (2, 1, 50)


def test_partitions_without_a_leader_count_for_nobody():
    with pytest.raises(ClusterError):
        busiest_leader([part("a", 0, -1, 100)])


def test_the_controller_is_the_leader_of_the_newest_epoch_any_node_saw():
    stale = {"leaderId": 1, "leaderEpoch": 3}
    fresh = {"leaderId": 2, "leaderEpoch": 4}
    assert controller_of([stale, fresh, {"leaderId": -1, "leaderEpoch": 5}]) == 2
    assert controller_of([{"leaderId": -1}]) is None


def test_a_partition_is_in_sync_when_every_replica_is():
    assert part("a", 0, 1, 0).in_sync
    assert not part("a", 0, 1, 0, isr=(1, 3)).in_sync
