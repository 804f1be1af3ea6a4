"""`python -m stream_jobs.assembly`: run the prompt-assembly job (a faust worker)."""

from __future__ import annotations

import faust

from infra.models.smollm2 import default_model_dir
from schemas.settings import Settings
from stream_jobs.assembly.app import AssemblyJob, create_app
from stream_jobs.assembly.retrieval import EmbeddingRetriever
from stream_jobs.assembly.tokens import token_counter


class _Worker(faust.Worker):
    async def on_startup_finished(self) -> None:
        await super().on_startup_finished()
        print("assembly job ready", flush=True)  # tables recovered, agents consuming


def main() -> None:
    settings = Settings.from_env()
    app = create_app(settings)
    tokenizer = settings.tokenizer_path or settings.model_path or default_model_dir(settings)
    retriever = None
    if settings.rag_docs_dir:
        retriever = EmbeddingRetriever.from_folder(
            settings.rag_docs_dir, min_score=settings.rag_min_score
        )
    AssemblyJob(app, settings, count_tokens=token_counter(tokenizer), retriever=retriever)
    _Worker(app, loglevel=settings.log_level, quiet=True).execute_from_commandline()


if __name__ == "__main__":
    main()
