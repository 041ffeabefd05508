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


def test_a_pair_is_read_on_the_questions_both_runs_answered(tmp_path):
    mod = _pairs()

    def run(name, rows):
        d = tmp_path / name
        d.mkdir()
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        return d

    def row(i, cpu, hit, error=None):
        return {"id": i, "error": error, "metrics": {"hits_at_1": hit},
                "usage": {"cpu_s": cpu, "calls": 2, "prompt_tokens": 100, "prompt_tokens_reused": 40,
                          "completion_tokens": 10, "parse_failures": 0}}

    before = run("b", [row("q1", 30, 1), row("q2", 50, 0), row("q3", 70, 1)])
    after = run("a", [row("q1", 10, 1), row("q2", 5, 1, error="boom")])  # stopped after q2, which failed
    p = mod.pair(before, after, "")
    assert p["questions"] == ["q1"]
    assert p["before"]["sums"]["cpu_s"] == 30 and p["after"]["sums"]["cpu_s"] == 10
    assert p["after"]["sums"]["prompt_tokens_computed"] == 60
    assert "| `x` | 1 | 30.0 → 10.0 | 3.00× |" in mod.table({"x": p})
