"""The local stack gives a lone vLLM CPU engine every core (none reserved), unless the
environment already names its cores; the other roles' environment is untouched."""

from __future__ import annotations

from runtime import processes
from runtime.engine_cores import BIND, RESERVED, shared_engine_env


def test_a_lone_engine_gets_every_core_and_none_reserved():
    assert shared_engine_env({}, [0, 1]) == {BIND: "0,1", RESERVED: "0"}
    assert shared_engine_env({}, [3, 5, 7]) == {BIND: "3,5,7", RESERVED: "0"}


def test_cores_named_in_the_environment_are_kept():
    assert shared_engine_env({BIND: "1"}, [0, 1]) == {}
    assert shared_engine_env({BIND: "auto"}, [0, 1]) == {}


def test_only_the_inference_worker_is_given_the_cores(monkeypatch, tmp_path):
    envs: dict[str, dict[str, str]] = {}

    class FakeChild:
        def __init__(self, name, module, log, env, **kwargs):
            envs[module] = env

        def wait_ready(self, timeout_s):
            return None

    monkeypatch.setattr(processes, "Child", FakeChild)
    processes.start_roles({"A": "1"}, tmp_path, only=("inference", "preprocess"))
    assert envs["workers.inference"][BIND] and envs["workers.inference"][RESERVED] == "0"
    assert envs["workers.inference"]["A"] == "1"
    assert envs["workers.preprocess"] == {"A": "1"}
