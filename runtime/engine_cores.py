"""Which cores a local vLLM CPU engine binds its threads to, when it shares the machine with
the rest of the stack (`VLLM_CPU_OMP_THREADS_BIND`; GPU engines ignore it).

vLLM's default (`auto`) pins one OpenMP thread per core and keeps a core for its front end:
on this 2-core machine, one engine thread pinned to core 0, which every other role of the
local stack also runs on. Given both cores (one thread on each, nothing reserved), the
stack served ~9% more turns per second at 16 streams (80 turns in 34.9 and 32.4 s against
38.6 and 35.5 with `auto`, alternating runs of `python -m bench.pipeline_latency --engine
vllm --concurrency 1,16 --rounds 5`, 2026-12-06; no change at one stream; docs/cost.md).
Keeping the roles on one core and the engine on the other was worse (one core is not
enough for the rest of the stack).

The local stack (`runtime.processes.start_roles`) applies this unless the environment
already names the cores; a dedicated inference node keeps vLLM's own choice.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

BIND = "VLLM_CPU_OMP_THREADS_BIND"
RESERVED = "VLLM_CPU_NUM_OF_RESERVED_CPU"


def engine_cores(worker: int, workers: int, cores: list[int]) -> str:
    """The cores the vLLM CPU engine of local worker `worker` (1-based, of `workers`) binds
    its threads to, as `VLLM_CPU_OMP_THREADS_BIND` takes them.

    With several workers each gets its own equal share, one core each (round-robin) when
    there are more workers than cores: vLLM's `auto` binds every engine on a host to the
    same cores, and a restarted worker's engine waited 203 s in `sched_setaffinity` while
    the other one ran (docs/reliability.md).
    """
    share = max(1, len(cores) // workers)
    start = ((worker - 1) * share) % len(cores)
    return ",".join(str(core) for core in cores[start : start + share])


def shared_engine_env(env: Mapping[str, str], cores: list[int] | None = None) -> dict[str, str]:
    """What to add to a lone local inference worker's environment: every core of this
    machine (of this process's affinity) for its engine, none reserved; nothing when the
    environment already says."""
    if BIND in env:
        return {}
    cores = sorted(os.sched_getaffinity(0)) if cores is None else cores
    return {BIND: engine_cores(1, 1, cores), RESERVED: "0"}
