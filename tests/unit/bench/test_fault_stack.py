"""Which cores a fault run's vLLM workers bind their engines to."""

from __future__ import annotations

from bench.faults.stack import engine_cores, roles


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
