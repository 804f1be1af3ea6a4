"""The import rules the code keeps by itself, read from the code (every `import` and
`from … import`, wherever it stands), and checked in CI by `tests/unit/infra/test_import_rules.py`.

Floors, from the ground up:
- the contract (`schemas/`): events, codec, topics, names, ids, errors, pure types. It
  imports only itself, `msgspec` and the standard library minus its I/O modules;
- the libraries: `runtime/` (process plumbing for every role) and `moderation/` (the safety
  checks); they import the contract and the libraries below them, never a role;
- the roles, side by side: `ws_edge`, each `workers.<role>`, each `stream_jobs.<job>`, each
  `producers.<producer>`, and the `flywheel` (evaluation sets, the quality gate, canaries).
  A role imports the floors below, its own package and its family's shared modules
  (`workers.runtime` for the workers, `stream_jobs.faust_app`/`.faust_transport`/`.metrics`/
  `.errors` for the faust jobs, `producers.turn_publisher`/`.errors` for the edge and the
  producers), never another role;
- the tools: `infra`, `harness`, `bench`, `tests`. `harness` (what tests and benchmarks share)
  never imports `bench` or `tests`; `bench` never imports `tests`; `infra` neither.

And no module imports itself back through others (no cycle).

    python -m infra.import_rules          # the floors, the edges between units, any breach
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from runtime.processes import REPO

PACKAGES = (
    "schemas",
    "runtime",
    "moderation",
    "ws_edge",
    "workers",
    "stream_jobs",
    "producers",
    "flywheel",
    "infra",
    "harness",
    "bench",
    "tests",
)
# what the contract may use from outside itself
CONTRACT_THIRD_PARTY = frozenset({"msgspec"})
IO_STDLIB = frozenset(
    {
        "asyncio",
        "concurrent",
        "ftplib",
        "http",
        "multiprocessing",
        "selectors",
        "smtplib",
        "socket",
        "socketserver",
        "sqlite3",
        "ssl",
        "subprocess",
        "threading",
        "urllib",
        "wsgiref",
    }
)
LIBRARIES = ("runtime", "moderation")  # in floor order: a library imports those before it
FAMILY_SHARED = {
    "workers.runtime": "workers",
    "stream_jobs.errors": "stream_jobs",
    "stream_jobs.faust_app": "stream_jobs",
    "stream_jobs.faust_transport": "stream_jobs",
    "stream_jobs.metrics": "stream_jobs",
    "producers.errors": "producers",
    "producers.turn_publisher": "producers",
    "producers.times": "producers",
}
# the edge's publisher (DESIGN §2) and the error it raises
SHARED_WITH = {"producers.turn_publisher": ("ws_edge",), "producers.errors": ("ws_edge",)}
TOOLS = ("infra", "harness", "bench", "tests")
TOOLS_MAY_NOT = {"harness": ("bench", "tests"), "bench": ("tests",), "infra": ("bench", "tests")}


@dataclass(frozen=True, slots=True)
class Import:
    source: str  # the importing module
    target: str  # the imported module (or the package a name came from)
    line: int
    top_level: bool  # at module level (a cycle through it breaks the import itself)


def module_name(path: Path, root: Path = REPO) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imports_of(source: str, text: str, known: Iterable[str]) -> list[Import]:
    """Every import of `text` (module `source`); `from pkg import mod` counts as `pkg.mod`
    when that module exists."""
    known = set(known)
    tree = ast.parse(text)
    top = {id(node) for node in tree.body}
    found = []
    for node in ast.walk(tree):
        at_top = id(node) in top
        if isinstance(node, ast.Import):
            found += [Import(source, a.name, node.lineno, at_top) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names = [f"{node.module}.{a.name}" for a in node.names]
            targets = [n for n in names if n in known] or [node.module]
            if len(targets) < len(names) and node.module not in targets:
                targets.append(node.module)
            found += [Import(source, t, node.lineno, at_top) for t in targets]
    return found


def read_imports(root: Path = REPO) -> list[Import]:
    files = [p for pkg in PACKAGES for p in sorted((root / pkg).rglob("*.py"))]
    known = {module_name(p, root) for p in files}
    found = []
    for path in files:
        found += imports_of(module_name(path, root), path.read_text(), known)
    return found


def unit(module: str) -> str:
    """The role, library or tool a module belongs to (`workers.inference`, `runtime`, …)."""
    parts = module.split(".")
    for shared in FAMILY_SHARED:
        if module == shared or module.startswith(shared + "."):
            return shared
    if parts[0] in ("workers", "stream_jobs", "producers") and len(parts) > 1:
        return ".".join(parts[:2])
    return parts[0]


def floor(name: str) -> str:
    if name == "schemas":
        return "contract"
    if name in LIBRARIES:
        return "library"
    if name in FAMILY_SHARED:
        return "family"
    if name in TOOLS:
        return "tool"
    return "role"


def breach(imp: Import) -> str | None:
    """Why this import breaks a rule (None: it keeps them)."""
    top = imp.target.split(".")[0]
    if top not in PACKAGES:
        return _outside(imp, top)
    src, dst = unit(imp.source), unit(imp.target)
    if src == dst:
        return None
    kind, target_kind = floor(src), floor(dst)
    if kind == "contract":
        return "the contract imports only itself"
    if kind == "library":
        below = ("schemas", *LIBRARIES[: LIBRARIES.index(src)])
        return None if dst in below else f"library {src} imports {dst}"
    if kind in ("role", "family"):
        if target_kind in ("contract", "library"):
            return None
        family = src.split(".")[0]
        if target_kind == "family" and (
            FAMILY_SHARED[dst] == family or src in SHARED_WITH.get(dst, ())
        ):
            return None
        return f"{src} imports {dst} ({target_kind})"
    forbidden = TOOLS_MAY_NOT.get(src, ())
    return f"{src} imports {dst}" if dst.split(".")[0] in forbidden else None


def _outside(imp: Import, top: str) -> str | None:
    if unit(imp.source) != "schemas" or top == "__future__":
        return None
    if top in CONTRACT_THIRD_PARTY:
        return None
    if top in sys.stdlib_module_names:
        return f"the contract imports {top} (an I/O module)" if top in IO_STDLIB else None
    return f"the contract imports the library {top}"


def breaches(found: Iterable[Import]) -> list[tuple[Import, str]]:
    return [(imp, why) for imp in found if (why := breach(imp)) is not None]


def cycles(found: Iterable[Import]) -> list[list[str]]:
    """Strongly connected groups of modules that import each other at module level."""
    graph: dict[str, set[str]] = {}
    for imp in found:
        if imp.top_level and imp.target.split(".")[0] in PACKAGES:
            graph.setdefault(imp.source, set()).add(imp.target)
            graph.setdefault(imp.target, set())
    return [sorted(group) for group in _strongly_connected(graph) if len(group) > 1]


def _strongly_connected(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """Tarjan's algorithm, iterative (the graph has thousands of modules)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    groups: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    group = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        group.append(member)
                        if member == node:
                            break
                    groups.append(group)
    return groups


def unit_edges(found: Iterable[Import]) -> dict[tuple[str, str], int]:
    """How many imports go from each unit to each other unit (tools left out)."""
    counts: dict[tuple[str, str], int] = {}
    for imp in found:
        if imp.target.split(".")[0] not in PACKAGES:
            continue
        src, dst = unit(imp.source), unit(imp.target)
        if src != dst and floor(src) != "tool":
            counts[(src, dst)] = counts.get((src, dst), 0) + 1
    return counts


def main() -> None:
    found = read_imports()
    by_floor: dict[str, set[str]] = {}
    for imp in found:
        by_floor.setdefault(floor(unit(imp.source)), set()).add(unit(imp.source))
    for name in ("contract", "library", "family", "role", "tool"):
        print(f"{name:8} {' '.join(sorted(by_floor.get(name, ())))}")
    print()
    for (src, dst), n in sorted(unit_edges(found).items()):
        print(f"  {src:26} -> {dst:26} {n}")
    problems = breaches(found)
    loops = cycles(found)
    for imp, why in problems:
        print(f"BREACH {imp.source}:{imp.line}: {why}")
    for group in loops:
        print("CYCLE " + " <-> ".join(group))
    print(f"\n{len(found)} imports, {len(problems)} breaches, {len(loops)} cycles")
    sys.exit(1 if problems or loops else 0)


if __name__ == "__main__":
    main()
