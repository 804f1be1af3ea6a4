"""Async full audit: a guard judges each completed exchange after the fact.

The live screens (`moderation`) must answer in milliseconds, so they read the answer in
windows as it streams; the audit reads the whole turn off the hot path (Llama Guard when its
weights are configured, `guard_model`; else the category classifier, `category_guard`), with
the `traces` topic as its durable queue (`ledger`), and turns its results into blacklist and
alert decisions (`policy`). Prompt and answer parsing are pure (`guard_prompt`); only
`guard_model` imports torch/transformers, lazily.
"""
