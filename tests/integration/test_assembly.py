"""The assembly job on the real Kafka: history truncated by tokens, kept across a restart of
the job (its table lives in a Kafka changelog), a user profile and retrieved passages in the
prompt, in the documented order."""

from __future__ import annotations

import pytest

from harness.factories import new_conversation_id as conv
from harness.kafka import assembled_prompt
from harness.stack import pipeline, running_assembly
from runtime.settings import Settings
from schemas.channels import RedisNames
from schemas.events import Role
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration

DOCS = {
    "mascot.md": "The turnstream mascot is a teal otter called Ripple.\n\n"
    "Ripple was drawn in 2026 by the design team.",
    "kitchen.md": "Our office kitchen has two espresso machines and a toaster.",
}


async def test_long_conversation_is_truncated_and_survives_a_restart(services, session_namespace):
    settings = Settings.from_env(
        namespace=f"{session_namespace}-trunc",
        edge_port=0,
        max_model_len=160,  # tiny context: ~4 turns fit
        tokenizer_path="none",  # ~4 bytes a token: the arithmetic is easy to follow
    )
    async with pipeline(settings, FakeEngine(token_interval_s=0.001), with_assembly=False) as p:
        conversation = conv()
        async with running_assembly(settings), EdgeClient.connect(p.url, p.token()) as client:
            dones = [
                await client.ask(conversation, f"question {i} " + "pad " * 6, max_tokens=32)
                for i in range(8)
            ]
        before = await assembled_prompt(settings, dones[-1].turn_id)
        # The job restarts: its table comes back from the changelog topic.
        async with running_assembly(settings), EdgeClient.connect(p.url, p.token()) as client:
            after_restart = await client.ask(conversation, "still remember?", max_tokens=32)
    after = await assembled_prompt(settings, after_restart.turn_id)
    for prompt in (before, after):
        assert prompt.context.dropped_messages > 0  # the oldest turns were dropped
        history = prompt.messages[:-1]
        assert history and history[0].role == Role.USER  # whole turns only
        assert prompt.context.prompt_tokens <= settings.max_model_len - 32
    assert before.messages[-1].content.startswith("question 7")
    assert after.messages[-2].content == dones[-1].text  # the newest turn survived the restart
    assert after.messages[-3].content.startswith("question 7")
    assert after.messages[-1].content == "still remember?"


async def test_profile_and_retrieved_passages_are_in_the_prompt(
    services, session_namespace, tmp_path
):
    for name, text in DOCS.items():
        (tmp_path / name).write_text(text)
    settings = Settings.from_env(
        namespace=f"{session_namespace}-rag",
        edge_port=0,
        system_prompt="You are a helpful assistant.",
        rag_docs_dir=str(tmp_path),
    )
    names = RedisNames.for_namespace(settings.namespace)
    async with pipeline(settings, FakeEngine(token_interval_s=0.001)) as p:
        await p.edge.redis.set(names.profile_key("acme", "alice"), "Alice is a vet in Lyon.")
        async with EdgeClient.connect(p.url, p.token("alice")) as client:
            about = await client.ask(conv(), "What animal is the turnstream mascot?")
        async with EdgeClient.connect(p.url, p.token("bob")) as client:
            unrelated = await client.ask(conv(), "Explain quantum chromodynamics briefly.")
    prompt = await assembled_prompt(settings, about.turn_id)
    system = prompt.messages[0]
    assert system.role == Role.SYSTEM
    text = system.content
    assert text.index("helpful assistant") < text.index("vet in Lyon") < text.index("teal otter")
    assert prompt.context.profile and prompt.context.retrieved[0] == "mascot.md#0"
    other = await assembled_prompt(settings, unrelated.turn_id)
    assert not other.context.profile  # bob has no profile; alice's is not his
    assert "mascot.md#0" not in other.context.retrieved
