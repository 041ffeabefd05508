"""The import graph (docs/architecture.md): no module imports from a layer above its own, and no
two modules import each other, directly or through others.

Every ``import``/``from ... import`` of every module under kgreason/ counts, including the lazy
ones inside functions: a lazy import still ties the two modules together. Importing a submodule
runs its package's ``__init__`` first, so a module that imports ``kgreason.llm.base`` from outside
``kgreason.llm`` also imports ``kgreason.llm`` (the package): a cycle through a package's
re-exports is a cycle.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

from conftest import REPO

PKG = REPO / "kgreason"

# bottom → top; a module may import from its own layer or any layer below. The same table is in
# docs/architecture.md; change both together.
LAYERS: list[tuple[str, ...]] = [
    ("kgreason", "kgreason.types", "kgreason.embed", "kgreason.runs", "kgreason.textio", "kgreason.secrets",
     "kgreason.storage", "kgreason.progress", "kgreason.paths", "kgreason.record", "kgreason.stats",
     "kgreason.ranking"),  # 0 ground floor
    ("kgreason.kg",),                                                     # 1 the graph
    ("kgreason.retrieval",),                                              # 2 k-hop + dense search
    ("kgreason.llm",),                                                    # 3 LLM backends, call cache, parsing
    ("kgreason.data", "kgreason.metrics"),                                # 4 datasets, scoring
    ("kgreason.judges", "kgreason.reasoners", "kgreason.preflight"),      # 5 methods (+ start-up checks)
    ("kgreason.tracking", "kgreason.tables"),                             # 6 reporting
    ("kgreason.runner", "kgreason.score", "kgreason.run"),                # 7 the run loop and its launch, checks, replay
                                                                          #   (kgreason.run: the old path, re-exported)
    ("kgreason.app", "kgreason.report", "kgreason.bench", "kgreason.eval", "kgreason.ask"),  # 8 the app and tools
    ("kgreason.cli",),                                                    # 9 the command
    ("kgreason.__main__",),                                               # 10 python -m kgreason
]

# Import cycles tolerated for now (none): each entry must still be a cycle, so the test fails
# once one is removed and its entry is left behind.
KNOWN_CYCLES: set[frozenset[str]] = set()


def module_name(path: Path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """kgreason modules named by the file's imports (``from a import b`` names ``a.b`` when
    that is a module, else ``a``)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            out.add(target)
            out.update(f"{target}.{a.name}" for a in node.names)
    out = {m for m in out if m in MODULES}
    # the packages above each imported module run first (unless this module is inside them)
    out |= {pkg for m in out for pkg in ancestors(m) if pkg in MODULES and not inside(name, pkg)}
    return {m for m in out if m != name}


def ancestors(module: str) -> list[str]:
    """``a.b.c`` -> ``["a.b", "a"]``."""
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(len(parts) - 1, 0, -1)]


def inside(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


MODULES = {module_name(p): p for p in PKG.rglob("*.py")}
GRAPH = {m: imports_of(p) for m, p in MODULES.items()}


def layer_of(module: str) -> int:
    best, depth = None, -1
    for i, prefixes in enumerate(LAYERS):
        for pre in prefixes:
            if (module == pre or module.startswith(pre + ".")) and pre.count(".") > depth:
                best, depth = i, pre.count(".")
    if best is None:
        raise AssertionError(f"{module} is in no layer of tests/test_architecture.py LAYERS")
    return best


def cycles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[frozenset[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(frozenset(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return out


def test_the_parser_sees_real_edges():
    """Guards the test itself: known edges (top-level, lazy, relative) are found."""
    assert "kgreason.llm.lazy" in GRAPH["kgreason.runner.run"]
    assert "kgreason.embed" in GRAPH["kgreason.retrieval.dense"]
    assert "kgreason.kg.cypher" in GRAPH["kgreason.reasoners.sgr.direct"]
    assert "kgreason.reasoners.sgr.reasoner" in GRAPH["kgreason.reasoners.sgr"]  # a package's own modules
    assert "kgreason.llm.lazy" in GRAPH["kgreason.reasoners.subqrag_index"]  # inside main()
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [frozenset("abc")]


def test_a_package_init_counts_as_imported():
    """Importing ``kgreason.llm.base`` from outside ``kgreason.llm`` runs ``kgreason/llm/__init__.py``
    first; from inside the package it adds no edge (the package is already being imported)."""
    assert "kgreason.llm" in GRAPH["kgreason.reasoners.base"]  # imports kgreason.llm.base
    assert "kgreason.llm" not in GRAPH["kgreason.llm.lazy"]


def test_the_call_cache_is_on_the_llm_floor_and_its_store_on_the_ground():
    """Issue 71, item 6: ``CachedLLM`` (an LLM wrapper) is in llm/, the store it writes to in
    storage/ (before, storage/llm_cache.py held both and sat on the LLM floor); the layering and the
    cycle check still catch the two ways that split goes wrong."""
    assert "kgreason.storage.llm_cache" not in MODULES and "kgreason.llm.cache" in MODULES
    assert layer_of("kgreason.storage.llm_calls") == layer_of("kgreason.storage") == 0
    assert layer_of("kgreason.llm.cache") == layer_of("kgreason.llm")
    # the wrapper outside llm/ again, with llm/ importing it back, is a cycle
    naive = {m: set(t) for m, t in GRAPH.items()}
    naive["kgreason.llm"].add("kgreason.storage.llm_calls")
    naive["kgreason.storage.llm_calls"].add("kgreason.llm")
    assert frozenset({"kgreason.llm", "kgreason.storage.llm_calls"}) in cycles(naive)
    # the ground-floor store importing the wrapper (or anything of the LLM floor) is an upward import
    naive = {m: set(t) for m, t in GRAPH.items()}
    naive["kgreason.storage.llm_calls"].add("kgreason.llm.base")
    assert upward_imports(naive) == ["kgreason.storage.llm_calls (layer 0) imports kgreason.llm.base (layer 3)"]


def test_each_package_is_on_one_floor():
    """Each file on its floor (issue 71, item 6): no LAYERS entry lifts a module of a package above
    or below the package's own floor (storage/llm_cache on the LLM floor and storage/replay on the
    tools' floor were the storage floor's upward imports). The root package ``kgreason`` is the
    exception: its loose modules each have their own floor."""
    entries = [(pre, i) for i, prefixes in enumerate(LAYERS) for pre in prefixes]
    lifted = [f"{pre} (layer {i}) is inside {pkg} (layer {j})" for pre, i in entries for pkg, j in entries
              if pkg != "kgreason" and pre.startswith(pkg + ".") and i != j]
    assert not lifted, "a package's module on another floor:\n" + "\n".join(lifted)


def test_the_run_loop_is_one_package():
    """Issue 71, item 6: the run loop's loose root modules and the bundle replay are one package,
    kgreason/runner/, on one floor; what lower floors import from a run (run-dir I/O, the run
    record, the start-up checks' error) stays on a floor they may import from."""
    for m in ("run", "compose", "overrides", "sweepguard", "callbacks", "replay"):
        assert f"kgreason.runner.{m}" in MODULES and layer_of(f"kgreason.runner.{m}") == layer_of("kgreason.runner")
    assert "kgreason.storage.replay" not in MODULES and "kgreason.compose" not in MODULES
    # the one re-export at an old path (README's Python block before the move): the same objects
    import kgreason.run
    import kgreason.runner.run

    assert kgreason.run.run is kgreason.runner.run.run and kgreason.run.build is kgreason.runner.run.build
    assert GRAPH["kgreason.run"] == {"kgreason.runner", "kgreason.runner.run"}
    assert layer_of("kgreason.runs") == layer_of("kgreason.record") == layer_of("kgreason.storage") == 0
    assert layer_of("kgreason.preflight") == layer_of("kgreason.reasoners") < layer_of("kgreason.runner")
    # the archive format reaching back for the replay, or a method for the run loop, is upward
    naive = {m: set(t) for m, t in GRAPH.items()}
    naive["kgreason.storage.bundle"].add("kgreason.runner.replay")
    naive["kgreason.reasoners.subqrag"].add("kgreason.runner")
    assert upward_imports(naive) == ["kgreason.reasoners.subqrag (layer 5) imports kgreason.runner (layer 7)",
                                     "kgreason.storage.bundle (layer 0) imports kgreason.runner.replay (layer 7)"]


def test_every_module_has_a_layer():
    for m in MODULES:
        layer_of(m)


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    return [f"{a} (layer {layer_of(a)}) imports {b} (layer {layer_of(b)})"
            for a, targets in graph.items() for b in sorted(targets) if layer_of(b) > layer_of(a)]


def test_no_upward_import():
    bad = upward_imports(GRAPH)
    assert not bad, "imports from a higher layer (docs/architecture.md):\n" + "\n".join(bad)


def test_no_import_cycle():
    found = cycles(GRAPH)
    new = [sorted(c) for c in found if c not in KNOWN_CYCLES]
    assert not new, f"import cycles: {new}"
    gone = [sorted(c) for c in KNOWN_CYCLES if c not in found]
    assert not gone, f"{gone} is no longer a cycle: delete it from KNOWN_CYCLES"


@pytest.mark.parametrize("lower,upper", [("kgreason.kg", "kgreason.llm"), ("kgreason.kg", "kgreason.retrieval"),
                                         ("kgreason.kg", "kgreason.reasoners")])
def test_kg_stays_below(lower, upper):
    """kg/ imports nothing from llm/, retrieval/ or reasoners/ (issue 15, items 2 and 6)."""
    bad = [(a, b) for a, targets in GRAPH.items() if a.startswith(lower + ".")
           for b in targets if b == upper or b.startswith(upper + ".")]
    assert not bad


@pytest.mark.parametrize("first", ["kgreason.llm.cache", "kgreason.storage.llm_calls", "kgreason.llm",
                                   "kgreason.llm.lazy", "kgreason.runner.run"])
def test_the_call_cache_imports_in_any_order(first):
    """A fresh interpreter imports the call cache whichever module comes first (a cycle through
    ``kgreason/llm/__init__.py`` would fail for one of these orders)."""
    import subprocess
    import sys

    code = (f"import {first}; from kgreason.llm.cache import CachedLLM, cache_key, open_store; "
            "from kgreason.storage.llm_calls import CallStore; "
            "from kgreason.llm.lazy import build_llm")
    p = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, p.stderr[-2000:]
