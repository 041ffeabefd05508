"""docs/llm.md's before/after table of issue 70 is generated from experiments/cost_issue70/pairs.json."""

from __future__ import annotations

import importlib.util
import json

from conftest import REPO


def _pairs():
    spec = importlib.util.spec_from_file_location("cost_pairs", REPO / "experiments" / "cost_issue70" / "pairs.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_the_docs_table_is_the_json_rendered():
    mod = _pairs()
    pairs = json.loads(mod.PAIRS.read_text(encoding="utf-8"))
    doc = (REPO / "docs" / "llm.md").read_text(encoding="utf-8")
    assert mod.BEGIN + "\n" + mod.table(pairs) + "\n" + mod.END in doc


def test_a_pair_reads_only_complete_runs(tmp_path):
    import pytest

    mod = _pairs()
    (tmp_path / "metrics.json").write_text(json.dumps({"run/status": "partial", "llm/cpu_s": 1.0}))
    with pytest.raises(SystemExit, match="partial"):
        mod.side(tmp_path)
