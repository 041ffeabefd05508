"""Issue #32 item 1: a config value that becomes a path component (kg.name in the kuzu cache path,
a reasoner's prompts_dir, the tables' output name) can never place a file outside its root, and a
kuzu re-export never deletes ``v-*`` folders in a directory that is not its own."""

from __future__ import annotations

import numpy as np
import pytest

from kgreason.paths import inside, safe_component


def _kg(name: str):
    from kgreason.kg.store import KG

    return KG(np.array([0]), np.array([0]), np.array([1]), ["a", "b"], ["r"], name=name)


@pytest.mark.parametrize("bad", ["../../../x", "/abs/x", "a/b", "..", ".", "", ".hidden", "a\\b", "a\x00b",
                                 "a\nb", "x" * 200])
def test_safe_component_refuses_names_that_are_not_one_path_component(bad):
    with pytest.raises(ValueError, match=r"kg\.name"):
        safe_component(bad, "kg.name")


@pytest.mark.parametrize("good", ["metaqa", "freebase_slice", "MetaQA 3-hop", "kg@v1.2", "umls+semnet"])
def test_safe_component_keeps_ordinary_names(good):
    assert safe_component(good, "kg.name") == good


def test_inside_refuses_a_path_that_resolves_outside_its_root(tmp_path):
    root = tmp_path / "cache"
    assert inside(root, root / "kuzu" / "x", "graphdb.cache_dir") == (root / "kuzu" / "x").resolve()
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "cache").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    for escape in (root / ".." / "x", tmp_path / "x", root / "link" / "db"):
        with pytest.raises(ValueError, match="graphdb.cache_dir"):
            inside(root, escape, "graphdb.cache_dir")


@pytest.mark.parametrize("name", ["../../../x", str("/tmp/kgreason-escape-test")])
def test_kuzu_cache_path_cannot_leave_cache_dir(tmp_path, name):
    pytest.importorskip("kuzu")
    from kgreason.kg.cypher import open_graphdb

    cache = tmp_path / "a" / "b" / "c"
    with pytest.raises(ValueError, match=r"kg\.name"):
        open_graphdb("kuzu", kg=_kg(name), cache_dir=cache)
    assert not (tmp_path / "x").exists() and not (cache / "kuzu").exists()


def test_kuzu_export_never_deletes_v_folders_of_a_foreign_directory(tmp_path):
    pytest.importorskip("kuzu")
    from kgreason.kg.cypher import KuzuDB

    foreign = tmp_path / "home"
    (foreign / "v-precious").mkdir(parents=True)
    (foreign / "v-precious" / "thesis.tex").write_text("x")
    with pytest.raises(ValueError, match="graphdb.path"):
        KuzuDB(foreign)
    assert (foreign / "v-precious" / "thesis.tex").exists()


def test_prompts_dir_is_one_component():
    from kgreason.reasoners.base import load_prompt

    assert load_prompt("cot", "answer")
    with pytest.raises(ValueError, match="prompts_dir"):
        load_prompt("../../kg", "answer")


def test_tables_name_is_one_component(tmp_path):
    from kgreason.tables import write_tables

    with pytest.raises(ValueError, match="name"):
        write_tables(tmp_path, name="../../escaped")
    assert not (tmp_path.parent.parent / "escaped.md").exists()


def test_a_multirun_job_dir_cannot_leave_the_sweep_dir(tmp_path):
    """hydra.sweep.subdir is made of the override values (``0_kg.name=../../x``): a job whose dir
    resolves outside the sweep dir stops before anything of the run is written there."""
    import subprocess
    import sys
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    sweep = tmp_path / "a" / "sweep"
    r = subprocess.run([sys.executable, "-m", "kgreason", "--multirun", "dataset.limit=1", "tracking=none",
                        "reports.hop_distribution=false", f"hydra.sweep.dir={sweep}", "hydra.sweep.subdir=../../escaped"],
                       cwd=repo, capture_output=True, text=True, timeout=300)
    assert r.returncode != 0
    assert "hydra.sweep.subdir" in r.stderr + r.stdout
    assert not (tmp_path / "escaped" / "predictions.jsonl").exists()
    assert not (tmp_path / "escaped" / "metrics.json").exists()
