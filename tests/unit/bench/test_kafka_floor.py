"""bench.kafka_floor's arithmetic: CPU per record around a run, and the spreads it reports
(no Kafka here; the benchmark itself is run by hand, `python -m bench.kafka_floor`)."""

from __future__ import annotations

import asyncio

import psutil

from bench.kafka_floor import measured, print_report, spread


def test_the_spread_is_median_low_and_high():
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "low": 1.0, "high": 3.0}


def test_a_runs_cpu_is_divided_by_its_records():
    async def burn() -> None:  # ~0.2 s of this process's CPU
        end = psutil.Process().cpu_times().user + 0.2
        while psutil.Process().cpu_times().user < end:
            sum(range(10_000))

    cost = asyncio.run(measured(burn, 1000, broker=None))
    assert 150 <= cost.client_us <= 1000  # 0.2 s over 1000 records: ~200 µs each
    assert cost.broker_us == 0.0 and cost.records_per_s > 0


def test_the_report_prints_every_case(capsys):
    one = {"median": 1.0, "low": 1.0, "high": 1.0}
    result = {
        "records": 10,
        "bytes": 5,
        "repeats": 1,
        "us_per_record": {
            "aiokafka | in flight 1 | groups 1": {
                "client": one,
                "broker": one,
                "records_per_s": one,
            }
        },
    }
    print_report(result)
    assert "aiokafka | in flight 1 | groups 1" in capsys.readouterr().out
