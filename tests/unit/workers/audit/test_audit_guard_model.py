"""GuardModel's real loading path (transformers, local folder) against a tiny trained guard."""

from __future__ import annotations

from pathlib import Path

import pytest

from harness.tiny_guard import EXAMPLES, build_tiny_guard
from workers.audit.guard_model import GuardModel
from workers.audit.guard_prompt import GuardResult


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_tiny_guard(tmp_path_factory.mktemp("tiny_guard") / "model")


@pytest.fixture(scope="module")
def guard(folder: Path) -> GuardModel:
    return GuardModel.load(folder)


def test_second_build_reuses_the_folder(folder: Path) -> None:
    stamp = (folder / "model.safetensors").stat().st_mtime_ns
    assert build_tiny_guard(folder) == folder
    assert (folder / "model.safetensors").stat().st_mtime_ns == stamp


def test_plain_prompt_without_llama3_headers(guard: GuardModel) -> None:
    assert guard.render("hi", "hello").startswith("Task: Check if there is unsafe content")


@pytest.mark.parametrize(("user", "agent", "answer"), EXAMPLES)
def test_trained_exchanges(guard: GuardModel, user: str, agent: str, answer: str) -> None:
    result = guard.classify(user, agent)
    assert result.error is None
    if answer == "safe":
        assert result.safe and result.categories == ()
    else:
        assert not result.safe and result.categories == ("S1",)


@pytest.mark.parametrize(
    ("user", "agent"),
    [
        ("x" * 200_000, "y" * 200_000),
        ("word " * 50_000, "ok"),
        ("\x00\x01\x02\x1b[31m\u200b\ufeff", "\x7f\x85"),
        ("", ""),
        ("héllo мир 你好 مرحبا 🙂\U0010ffff", "ok \U0001d518\U0001d52b\U0001d526"),
        ("\ud800 lone surrogate", "fine"),
    ],
)
def test_odd_text_returns_a_result(guard: GuardModel, user: str, agent: str) -> None:
    result = guard.classify(user, agent)  # cleaned and truncated, so it is judged
    assert isinstance(result, GuardResult)
    assert result.error is None
    assert result.raw in ("safe", "unsafe\nS1")


def test_prompt_is_truncated_to_the_context(guard: GuardModel) -> None:
    ids = guard._prompt_ids(guard.render("word " * 50_000, "word " * 50_000))
    assert len(ids) == guard.max_prompt_tokens
    assert guard.max_prompt_tokens <= guard.model.config.max_position_embeddings


def test_model_failure_is_recorded_not_raised(guard: GuardModel) -> None:
    broken = GuardModel(guard.tokenizer, guard.model)

    def boom(*_: object, **__: object) -> None:
        raise RuntimeError("kaboom")

    broken.model = type("M", (), {"generate": boom, "config": guard.model.config})()
    result = broken.classify("hi", "hello")
    assert result.error is not None and "kaboom" in result.error
    assert result.categories == ()


def test_missing_folder_raises_on_load(tmp_path: Path) -> None:
    with pytest.raises(OSError):
        GuardModel.load(tmp_path / "nope")
