"""The multilingual category classifier: a linear head on a sentence encoder that ships in a
package, trained on the project's own labelled set (`moderation/dataset`).

Two encoders, chosen per text by its script (`scripts.py`): Universal Sentence Encoder
multilingual v3 (numpy, ~3-6 ms a window, 16 languages) and multilingual-e5-small (4-bit,
its own C runtime, ~30-45 ms, ~100 languages) for scripts USE never saw (Devanagari...).
Train with `python -m moderation.categories.train`; the heads (a few tens of KB) live in
`model/`.
"""
