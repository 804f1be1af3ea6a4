"""`python -m stream_jobs.assembly`: run the prompt-assembly job (a faust worker)."""

from __future__ import annotations

from infra.models.smollm2 import default_model_dir
from schemas.settings import Settings
from stream_jobs.assembly.app import AssemblyJob, create_app
from stream_jobs.assembly.retrieval import EmbeddingRetriever
from stream_jobs.assembly.semantic_router import RouterConfig, SemanticRouter, minilm_embedder
from stream_jobs.assembly.tokens import token_counter
from stream_jobs.faust_app import run_worker


def semantic_router(settings: Settings, retriever: EmbeddingRetriever | None) -> SemanticRouter:
    """Rules from TURNSTREAM_ROUTER_RULES (or the bundled ones), and the MiniLM classifier
    when enabled (sharing the retriever's model when there is one)."""
    path = settings.router_rules_path
    config = RouterConfig.from_file(path) if path else RouterConfig.default()
    if not settings.router_classifier:
        return SemanticRouter(config)
    import torch

    torch.set_num_threads(1)  # one short query at a time: ~12 ms on one thread, ~170 on two
    return SemanticRouter(config, minilm_embedder(retriever))


def main() -> None:
    settings = Settings.from_env()
    app = create_app(settings)
    tokenizer = settings.tokenizer_path or settings.model_path or default_model_dir(settings)
    retriever = None
    if settings.rag_docs_dir:
        retriever = EmbeddingRetriever.from_folder(
            settings.rag_docs_dir, min_score=settings.rag_min_score
        )
    AssemblyJob(
        app,
        settings,
        count_tokens=token_counter(tokenizer),
        retriever=retriever,
        intents=semantic_router(settings, retriever),
    )
    run_worker(app, settings, "assembly job ready")


if __name__ == "__main__":
    main()
