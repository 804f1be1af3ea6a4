"""Where a fault run's roles live: the cores its vLLM workers bind their engines to, the
ports of its own services."""

from __future__ import annotations

from bench.faults.services import PORTS_FROM, ephemeral_range, pick_ports
from bench.faults.stack import roles
from runtime.engine_cores import engine_cores


def test_two_workers_on_two_cores_get_one_core_each():
    assert [engine_cores(i, 2, [0, 1]) for i in (1, 2)] == ["0", "1"]


def test_workers_split_many_cores_evenly():
    assert [engine_cores(i, 2, list(range(8))) for i in (1, 2)] == ["0,1,2,3", "4,5,6,7"]


def test_more_workers_than_cores_go_round_robin():
    assert [engine_cores(i, 3, [2, 3]) for i in (1, 2, 3)] == ["2", "3", "2"]


def test_only_a_real_engine_is_bound():
    bound = {r.key: dict(r.env) for r in roles(2, 1, 9000, 9100, cores=[0, 1])}
    assert bound["inference-1"]["VLLM_CPU_OMP_THREADS_BIND"] == "0"
    assert bound["inference-2"]["VLLM_CPU_OMP_THREADS_BIND"] == "1"
    unbound = {r.key: dict(r.env) for r in roles(2, 1, 9000, 9100)}
    assert "VLLM_CPU_OMP_THREADS_BIND" not in unbound["inference-1"]


def test_the_runs_ports_stay_below_the_ephemeral_range_and_apart():
    """A port from the ephemeral range could be taken by an outgoing connection between
    the pick and the listener's bind: the run's start failed now and then."""
    low, _ = ephemeral_range()
    for _ in range(20):
        ports = pick_ports(edges=2, kafka_nodes=3)
        ranges = [
            range(ports.kafka, ports.kafka + 6),
            range(ports.redis, ports.redis + 1),
            range(ports.edge, ports.edge + 2),
            range(ports.edge_http, ports.edge_http + 2),
            range(ports.clickhouse_http, ports.clickhouse_http + 1),
        ]
        every = [port for r in ranges for port in r]
        assert len(set(every)) == len(every)
        assert all(PORTS_FROM <= port < low for port in every)


def test_the_full_fault_command_runs_the_suite_on_both_engines():
    """`python -m bench.faults`: the fake engine, then vLLM at a load a CPU engine sustains."""
    from bench.faults.__main__ import VLLM_LOAD, parse

    fake, vllm = parse([])
    assert (fake.engine, vllm.engine) == ("fake", "vllm")
    assert fake.scenarios == vllm.scenarios and len(fake.scenarios) == 7
    assert vllm.load.turns_per_s == VLLM_LOAD.turns_per_s < fake.load.turns_per_s
    assert vllm.load.users == VLLM_LOAD.users
    [only] = parse(["--engine", "fake", "--cluster"])
    assert only.engine == "fake" and only.cluster and len(only.scenarios) == 4
