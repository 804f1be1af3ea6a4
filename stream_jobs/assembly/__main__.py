"""`python -m stream_jobs.assembly`: run the prompt-assembly job (a faust worker)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from runtime.redis import redis_client
from runtime.settings import Settings
from runtime.smollm2 import default_model_dir
from schemas.channels import RedisNames
from stream_jobs.assembly.app import AssemblyJob, create_app
from stream_jobs.assembly.cache.answer_cache import AnswerCache, CacheConfig
from stream_jobs.assembly.retrieval import EmbeddingRetriever
from stream_jobs.assembly.routing.semantic_router import (
    RouterConfig,
    SemanticRouter,
    minilm_embedder,
)
from stream_jobs.assembly.tokens import chat_tokenizer, token_counter
from stream_jobs.faust_app import run_worker

Embed = Callable[[list[str]], np.ndarray]


def shared_embedder(settings: Settings, retriever: EmbeddingRetriever | None) -> Embed | None:
    """One MiniLM for retrieval, the router's classifier and the cache (None: none needs it)."""
    if not (settings.router_classifier or settings.cache_enabled):
        return None
    import torch

    torch.set_num_threads(1)  # one short query at a time: ~12 ms on one thread, ~170 on two
    return minilm_embedder(retriever)


def semantic_router(settings: Settings, embed: Embed | None) -> SemanticRouter:
    """Rules from TURNSTREAM_ROUTER_RULES (or the bundled ones), and the MiniLM classifier
    when enabled."""
    path = settings.router_rules_path
    config = RouterConfig.from_file(path) if path else RouterConfig.default()
    return SemanticRouter(config, embed if settings.router_classifier else None)


def main() -> None:
    settings = Settings.from_env()
    app = create_app(settings)
    tokenizer = settings.tokenizer_path or settings.model_path or default_model_dir(settings)
    retriever = None
    if settings.rag_docs_dir:
        retriever = EmbeddingRetriever.from_folder(
            settings.rag_docs_dir, min_score=settings.rag_min_score
        )
    embed = shared_embedder(settings, retriever)
    answers = None
    if settings.cache_enabled and embed is not None:
        answers = AnswerCache(
            lambda: redis_client(settings.redis_url),  # called once, on the job's loop
            RedisNames.for_namespace(settings.namespace).prefix,
            embed,
            persona=settings.system_prompt,
            config=CacheConfig(
                threshold=settings.cache_threshold,
                ttl_s=settings.cache_ttl_s,
                max_entries=settings.cache_max_entries,
                max_query_chars=settings.cache_max_query_chars,
            ),
        )
    counter = token_counter(tokenizer)
    AssemblyJob(
        app,
        settings,
        count_tokens=counter,
        chat_tokenizer=chat_tokenizer(counter),
        retriever=retriever,
        intents=semantic_router(settings, embed),
        answers=answers,
    )
    run_worker(app, settings, "assembly job ready")


if __name__ == "__main__":
    main()
