"""The fault suite in reduced form (`python -m bench.faults` is the full one): its own Kafka
and Redis, the real roles as processes, a short load, and every fault — kill -9 an
inference worker mid-stream, restart the Kafka broker, restart Redis, ClickHouse down 20 s,
kill -9 an edge with clients attached (they resume on the other), kill -9 the assembly and
the traces faust jobs; then the tool scenario (kill -9 the tools worker mid-call, a
question sent again, a call stopped, every request redelivered: each side effect counted).
After each: every accepted turn ended once at its client, nothing answered twice or
decided twice, streamed texts whole, every accepted turn recorded in `turns.completed` as
its client saw it and traced once in ClickHouse, and the fault hit work in flight (the
killed worker's answers restarted on the other; the killed edge's clients resumed on the
other).

~5 min on 2 cores: starting the stack, the faults' outages, and Kafka's session timeout
(TURNSTREAM_KAFKA_SESSION_TIMEOUT_S, 10 s) for each killed member's partitions."""

from __future__ import annotations

import pytest

from bench.faults.load import LoadConfig
from bench.faults.report import table
from bench.faults.runner import SuiteOptions, failures, problems, run_suite
from bench.faults.scenarios import SCENARIOS

pytestmark = pytest.mark.integration

CI_SCENARIOS = tuple(SCENARIOS)  # every fault: with 10 s session timeouts none waits a minute


@pytest.mark.timeout(900)  # a bound, not a target: the stack starts and recovers slowly on 2 cores
async def test_the_books_balance_under_faults():
    options = SuiteOptions(
        scenarios=CI_SCENARIOS,
        load=LoadConfig(users=4, turns_per_s=3.0, turns_per_conversation=3),
        token_interval_ms=40.0,  # ~1.3 s answers: the kill finds some still streaming
        warmup_s=4.0,
        after_s=4.0,
        tools=True,  # and the tool scenario: its side effects counted
    )
    run = await run_suite(options, progress=print)
    results = run.scenarios
    print(table(results))
    assert [r.name for r in results] == list(CI_SCENARIOS)
    for result in results:
        assert not problems(result), f"{result.name}: {problems(result)} {failures(result)}"
        assert result.books.balanced
    by_name = {r.name: r for r in results}
    assert by_name["edge-kill"].books.resumed > 0  # clients did resume on the other edge
    assert by_name["worker-kill"].books.restarted > 0  # the kill cut answers in flight
    assert run.tools is not None and run.tools.balanced, run.tools.problems()
    assert run.tools.regenerated and run.tools.redelivered and run.tools.stopped
