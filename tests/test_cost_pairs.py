"""docs/llm.md's before/after table of issue 70 is generated from experiments/cost_issue70/pairs.json."""

from __future__ import annotations

import importlib.util
import json

import pytest

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


def test_the_per_token_fit_recovers_known_costs(tmp_path):
    """A pair's fitted CPU cost a computed prompt token and a decoded token (least squares over the
    runs' traced calls): calls made to cost 30 ms a prompt token, 60 ms a decoded one and 0.5 s a
    call give those numbers back, and the table shows them; a pair without traces shows –."""
    mod = _pairs()

    def call(computed, decoded):
        return {"kind": "llm", "data": {"usage": {"prompt_tokens": computed + 7, "prompt_tokens_reused": 7,
                                                  "completion_tokens": decoded,
                                                  "cpu_s": 0.03 * computed + 0.06 * decoded + 0.5}}}

    calls = [call(c, d) for c, d in [(10, 5), (400, 30), (50, 200), (900, 12), (3, 80), (120, 120),
                                     (700, 400), (20, 20), (60, 300), (250, 7), (33, 44)]]
    f = mod.fit([{"trace": calls[:6]}, {"trace": calls[6:]}])
    assert (f["prompt_ms"], f["decode_ms"], f["call_s"], f["calls"]) == (30.0, 60.0, 0.5, 11)
    p = {"questions": ["q"], "note": "",
         "before": {"fit": f, "sums": {"cpu_s": 9, "prompt_tokens_computed": 9, "completion_tokens": 1,
                                       "parse_failures": 0, "calls": 1, "hits_at_1": 0}}}
    p["after"] = p["before"]
    assert mod.table({"x": p}).splitlines()[2].endswith("| 30 / 60 → 30 / 60 |")
    assert mod.fit([{"trace": calls[:3]}]) is None  # too few calls to fit three costs
    p["before"] = {**p["before"], "fit": None}
    assert mod.table({"x": p}).splitlines()[2].endswith("| – |")


def test_a_counted_pair_takes_computed_tokens_from_llama_cpp_s_own_count(tmp_path):
    """``add --counted``: a before checkout with no reuse accounting (0ce204e) is measured by
    count_eval.py from outside; prompt tokens computed = tokens evaluated less completion tokens,
    over a whole run, so a counted run holds only the pair's questions (- takes a side's own
    accounting); CPU seconds show –."""
    mod = _pairs()

    def run(name, rows, evaluated):
        d = tmp_path / name
        d.mkdir()
        (d / "predictions.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
        (tmp_path / f"{name}.json").write_text(json.dumps({"evaluated_tokens": evaluated}))
        return d, tmp_path / f"{name}.json"

    def row(i, completion, error=None):
        return {"id": i, "error": error, "metrics": {"hits_at_1": 1},
                "usage": {"calls": 3, "prompt_tokens": 5000, "completion_tokens": completion, "parse_failures": 0}}

    (b, bc), (a, ac) = run("b", [row("q1", 100), row("q2", 300)], 12_400), run("a", [row("q1", 50), row("q2", 150)], 5_200)
    p = mod.pair(b, a, "", (bc, ac))
    assert p["before"]["sums"]["prompt_tokens_computed"] == 12_000 and p["after"]["sums"]["prompt_tokens_computed"] == 5_000
    assert "| `x` | 2 | – | – | 6,000 → 2,500 | 2.40× |" in mod.table({"x": p})
    (c, cc) = run("c", [row("q1", 50), row("q2", 150, error="boom")], 5_200)
    with pytest.raises(SystemExit, match="only the pair's 1 questions, each without an error"):
        mod.pair(b, c, "", (bc, cc))
    # a counted before stopped after q1 against an after measured by its own accounting on q1 (-)
    (s, sc) = run("s", [row("q1", 100)], 6_100)
    own = {**row("q1", 50), "usage": {**row("q1", 50)["usage"], "prompt_tokens_reused": 3_000}}
    (o, _) = run("o", [own, row("q2", 150)], 0)
    p = mod.pair(s, o, "", (sc, None))
    assert p["questions"] == ["q1"] and p["before"]["sums"]["prompt_tokens_computed"] == 6_000
    assert p["after"]["sums"]["prompt_tokens_computed"] == 2_000 and "counted" not in p["after"]
    with pytest.raises(SystemExit, match="2 rows"):
        mod.pair(s, o, "", (None, sc))  # the after run answered q2 too: its whole-run count is not the pair's
