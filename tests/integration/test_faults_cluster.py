"""The replicated cluster's faults in reduced form (`python -m bench.faults --cluster` is the
full one): a 3-broker KRaft cluster of the run's own (replication factor 3,
min.insync.replicas 2, acks=all, idempotent producers), the real roles as processes, a
short load, and its four faults — kill -9 the broker leading the busiest partitions,
SIGSTOP that broker for 30 s, a rolling restart of the three, kill -9 the active
controller. After each: every accepted turn ended once at its client, nothing answered or
decided twice, streamed texts whole, every answer recorded as its client saw it and traced
once, turns were open when the fault struck, and every partition came back in sync.

The pause joined once its losses were found and fixed at their root: five ways faust
dropped records in the rebalance it causes (`stream_jobs/faust_transport.py`,
docs/reliability.md), the last one (faust's flow control emptying the stream queues at a
recovery's end) proven on the real broker by `test_faust_flow.py`.

~5 min on 2 cores (the rolling restart waits for each node to catch up; the pause is 30 s
and the jobs' rebalance after it)."""

from __future__ import annotations

import pytest

from bench.faults.load import LoadConfig
from bench.faults.report import table
from bench.faults.runner import SuiteOptions, failures, problems, run_suite
from bench.faults.scenarios import CLUSTER_SCENARIOS

pytestmark = pytest.mark.integration

CI_CLUSTER_SCENARIOS = tuple(CLUSTER_SCENARIOS)  # all four


@pytest.mark.timeout(900)  # a bound, not a target: three JVMs and the stack on 2 cores
async def test_the_books_balance_when_the_cluster_loses_a_broker():
    options = SuiteOptions(
        scenarios=CI_CLUSTER_SCENARIOS,
        load=LoadConfig(users=4, turns_per_s=3.0, turns_per_conversation=3),
        token_interval_ms=40.0,
        warmup_s=4.0,
        after_s=4.0,
        cluster=True,
    )
    run = await run_suite(options, progress=print)
    results = run.scenarios
    print(table(results))
    assert [r.name for r in results] == list(CI_CLUSTER_SCENARIOS)
    for result in results:
        assert not problems(result), f"{result.name}: {problems(result)} {failures(result)}"
        assert result.books.balanced
        assert result.open_at_fault > 0 and result.fault_hit, f"{result.name} hit nothing"
        assert result.struck, f"{result.name}: no node named as struck"
