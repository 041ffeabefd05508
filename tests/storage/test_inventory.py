"""Storage in one room (issue 58, item 7): the generic on-disk stores live in kgreason/storage/, and
``kgreason/storage/__init__.py`` names every module that writes a cache or a lock, in storage/ or
not, so a reader finds them all in one place."""

from __future__ import annotations

import ast
import importlib
import re

import pytest

from conftest import REPO

PKG = REPO / "kgreason"

# what a module that keeps something on disk between runs does: a SQLite file, a build lock, a
# file lock, the call store, a temporary file renamed into place, a memory map sized up front
WRITES_A_STORE = re.compile(r"sqlite3\.connect\(|store_lock\(|\.flock\(|KeyValueStore\(|CallStore\.open\("
                            r"|os\.replace\(|reserved_npy\(")


def module_name(path) -> str:
    parts = list(path.relative_to(REPO).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def storage_doc() -> str:
    return ast.get_docstring(ast.parse((PKG / "storage" / "__init__.py").read_text(encoding="utf-8"))) or ""


def named(module: str, doc: str) -> bool:
    """``module`` appears in ``doc`` as a whole dotted name (a name in it, ``module.Class``, counts)."""
    return re.search(rf"(?<![\w.]){re.escape(module)}(?![\w])", doc) is not None


def top_level_names(path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.Assign):
            out.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return out


def test_every_module_that_writes_a_store_is_listed():
    doc = storage_doc()
    writers = sorted(module_name(p) for p in PKG.rglob("*.py")
                     if p.name != "__init__.py" and WRITES_A_STORE.search(p.read_text(encoding="utf-8")))
    assert {"kgreason.kg.compiled", "kgreason.storage.textcache"} <= set(writers)  # the pattern sees real writers
    missing = [m for m in writers if not named(m, doc)]
    assert not missing, f"write to disk but are not listed in kgreason/storage/__init__.py: {missing}"


def test_every_module_the_list_names_exists():
    """The list does not rot: each ``kgreason.x.y`` it names is a module, or a name defined in one."""
    names = set(re.findall(r"(?<![\w.])(kgreason(?:\.\w+)+)", storage_doc()))
    assert len(names) > 10
    modules = {module_name(p): p for p in PKG.rglob("*.py")}

    def exists(name: str) -> bool:
        mod, _, attr = name.rpartition(".")
        return name in modules or (mod in modules and attr in top_level_names(modules[mod]))

    assert not sorted(n for n in names if not exists(n))


def test_the_checker_finds_a_missing_entry():
    assert named("kgreason.kg.compiled", "``kgreason.kg.compiled`` – the compiled KGs")
    assert named("kgreason.kg.compiled", ":func:`kgreason.kg.compiled.load_cached`")
    assert not named("kgreason.kg.compiled", "``kgreason.kg.compiled_x``, ``kgreason.kg``, ``xkgreason.kg.compiled``")


@pytest.mark.parametrize("module,name", [
    ("kgreason.storage.callstore", "KeyValueStore"),
    ("kgreason.storage.llm_calls", "CallStore"),
    ("kgreason.storage.textcache", "TextCache"),
    ("kgreason.storage.embedstore", "KGStore"),
    ("kgreason.storage.embedstore", "store_lock"),
])
def test_the_generic_stores_live_in_storage(module, name):
    assert getattr(importlib.import_module(module), name).__module__ == module
