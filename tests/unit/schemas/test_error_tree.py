"""One error tree: every exception class turnstream defines descends from
`schemas.errors.TurnstreamError` (so it carries a `code` and `retryable`), through one root
per package. Read from the code, so a new class under a bare `Exception` fails here."""

from __future__ import annotations

import ast
import builtins
import importlib

import pytest

from infra.import_rules import PACKAGES, REPO, module_name
from schemas.errors import TurnstreamError

SERVICE_PACKAGES = tuple(p for p in PACKAGES if p not in ("harness", "bench", "tests"))
BUILTIN_ERRORS = {
    name
    for name in dir(builtins)
    if isinstance(getattr(builtins, name), type)
    and issubclass(getattr(builtins, name), BaseException)
}
ROOTS = {
    "schemas.errors.SchemaError",
    "runtime.errors.PlumbingError",
    "moderation.errors.SafetyError",
    "ws_edge.errors.EdgeError",
    "workers.runtime.errors.WorkerError",
    "workers.inference.errors.InferenceError",
    "workers.preprocess.errors.PreprocessError",
    "workers.tts.errors.SpeechError",
    "workers.imagegen.errors.ImageGenError",
    "workers.sink.errors.SinkError",
    "workers.tools.errors.ToolsError",
    "stream_jobs.errors.StreamJobError",
    "producers.errors.ProducerError",
    "flywheel.errors.FlywheelError",
    "infra.errors.InfraError",
}


def exception_classes():
    """(module, class, base names) of every class that names an exception base."""
    for package in SERVICE_PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.ClassDef):
                    bases = [ast.unparse(b).rsplit(".", 1)[-1] for b in node.bases]
                    if any(
                        b in BUILTIN_ERRORS or b.endswith(("Error", "Exception")) for b in bases
                    ):
                        yield module_name(path), node.name, bases


def test_no_exception_class_stands_outside_the_tree():
    loose = [
        f"{module}.{name}({', '.join(bases)})"
        for module, name, bases in exception_classes()
        if name != "TurnstreamError" and all(b in BUILTIN_ERRORS for b in bases)
    ]
    assert loose == []


def test_each_package_has_one_root_directly_under_turnstream_error():
    direct = {
        f"{module}.{name}"
        for module, name, bases in exception_classes()
        if "TurnstreamError" in bases
    }
    assert direct == ROOTS


@pytest.mark.parametrize("root", sorted(ROOTS))
def test_each_root_carries_a_code_and_whether_to_retry(root):
    module, name = root.rsplit(".", 1)
    cls = getattr(importlib.import_module(module), name)
    assert issubclass(cls, TurnstreamError)
    assert isinstance(cls.code, str) and cls.code and isinstance(cls.retryable, bool)
