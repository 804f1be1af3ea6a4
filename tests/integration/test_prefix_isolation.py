"""The prefix cache is scoped per tenant on the real pipeline (Kafka, Redis, the assembly job,
the inference worker; the fake engine's simulated prefix cache keyed as the worker salts
it): a tenant's prompt reuses its own cached prefix, never another tenant's identical one,
whose cache-hit timing would tell what that tenant sent. The same on real vLLM blocks:
`tests/integration/test_vllm.py::test_the_prefix_cache_is_not_shared_between_tenants`."""

from __future__ import annotations

import uuid

import pytest

from harness.factories import new_conversation_id as conv
from harness.stack import pipeline
from runtime.settings import Settings
from workers.inference.engines.fake_engine import FakeEngine
from ws_edge.client import EdgeClient

pytestmark = pytest.mark.integration

DOCUMENT = "Please read this pasted report carefully before answering. " * 30  # > the answer cache


async def cached_tokens(running, tenant: str) -> int:
    async with EdgeClient.connect(running.url, running.token("user", tenant)) as client:
        done = await client.ask(conv(), DOCUMENT, max_tokens=4)
    return done.usage.cached_prompt_tokens


@pytest.mark.parametrize("per_tenant", [True, False])
async def test_a_tenant_reuses_its_own_prefix_and_never_anothers(per_tenant):
    settings = Settings.from_env(
        namespace=f"salt-{uuid.uuid4().hex[:6]}",
        edge_port=0,
        prefix_cache_per_tenant=per_tenant,
        cache_enabled=False,
    )
    engine = FakeEngine(token_interval_s=0.001, prefix_cache_tokens=20_000)
    async with pipeline(settings, engine, with_safety=False) as running:
        first = await cached_tokens(running, "acme")
        other = await cached_tokens(running, "globex")  # the same prompt, another tenant
        again = await cached_tokens(running, "acme")
    assert first == 0 and again > 0  # a tenant's own repeat is served from the cache
    if per_tenant:
        assert other == 0
    else:  # the control: one shared cache serves the other tenant's identical prompt
        assert other > 0
