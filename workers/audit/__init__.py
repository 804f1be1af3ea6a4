"""Async full audit: Llama Guard scores each completed exchange after the fact.

The live screens (`workers.safety`) must answer in milliseconds, so they are rules and a
small classifier; the audit runs a real guard model on the whole turn off the hot path,
behind a bounded queue (`queue`), and turns its results into blacklist and alert decisions
(`policy`). Prompt and answer parsing are pure (`guard_prompt`); only `guard_model` imports
torch/transformers, lazily.
"""
