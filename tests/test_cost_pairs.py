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
    p["before"] = {**p["before"], "fit": None}  # a side with no per-call CPU (0ce204e's traces)
    assert mod.table({"x": p}).splitlines()[2].endswith("| – → 30 / 60 |")
    p["after"] = p["before"]
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


def _count_eval():
    spec = importlib.util.spec_from_file_location("count_eval", REPO / "experiments" / "cost_issue70" / "count_eval.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_count_eval_records_each_row_at_the_next_model_call(tmp_path):
    """count_eval.py's row timeline: a row of predictions.jsonl is recorded at the next model call,
    with the tokens evaluated before it (none of the next question's) and the CPU clock then; the
    last row at exit; start-up is the clock at the first call."""
    mod = _count_eval()
    preds, clock = tmp_path / "predictions.jsonl", iter([1.5, 10.0, 25.0, 26.0, 30.0])
    c = mod.Counter(preds, clock=lambda: next(clock))
    c.decode(300)          # q1's prompt (start-up 1.5 s)
    c.decode(1)
    preds.write_text('{"id": "q1"}\n')
    c.decode(200)          # q2's prompt: q1's row recorded first (301 tokens, 10.0 s)
    preds.write_text('{"id": "q1"}\n{"id": "q2"}\n')
    got = c.final()        # q2's row at exit (501 tokens, 25.0 s), then the process's total (26.0 s)
    assert got["first_decode_cpu_s"] == 1.5 and got["process_cpu_s"] == 26.0
    assert got["rows"] == [{"rows": 1, "evaluated_tokens": 301, "process_cpu_s": 10.0},
                           {"rows": 2, "evaluated_tokens": 501, "process_cpu_s": 25.0}]
    assert (got["decode_calls"], got["single_token_decodes"]) == (3, 1)
    assert mod.run_dir_rows(["a=1", "hydra.run.dir=/x/y"]) == mod.Path("/x/y/predictions.jsonl")
    assert mod.run_dir_rows(["a=1"]) is None


def test_a_counted_side_is_read_at_the_pair_s_row_of_its_timeline(tmp_path):
    """A counted run with a row timeline that went on past the pair's questions (the after side
    answered 3, the before side was stopped after 2) is read at its 2nd row: tokens evaluated and
    process CPU from its first model call until then; the table marks process CPU, and process CPU
    against a route's own CPU seconds is not compared."""
    mod = _pairs()

    def run(name, ids, count):
        d = tmp_path / name
        d.mkdir()
        (d / "predictions.jsonl").write_text("".join(json.dumps(
            {"id": i, "error": None, "metrics": {"hits_at_1": 1},
             "usage": {"calls": 2, "prompt_tokens": 4000, "completion_tokens": 100, "parse_failures": 0,
                       "prompt_tokens_reused": 3000, "cpu_s": 40}}) + "\n" for i in ids))
        (tmp_path / f"{name}.json").write_text(json.dumps(count))
        return d, tmp_path / f"{name}.json"

    b, bc = run("b", ["q1", "q2"], {"evaluated_tokens": 6_200, "process_cpu_s": 1_250, "first_decode_cpu_s": 50,
                                    "rows": [{"rows": 1, "evaluated_tokens": 3_100, "process_cpu_s": 650},
                                             {"rows": 2, "evaluated_tokens": 6_200, "process_cpu_s": 1_240}]})
    a, ac = run("a", ["q1", "q2", "q3"], {"evaluated_tokens": 4_000, "process_cpu_s": 500, "first_decode_cpu_s": 20,
                                          "rows": [{"rows": 1, "evaluated_tokens": 1_200, "process_cpu_s": 150},
                                                   {"rows": 2, "evaluated_tokens": 2_600, "process_cpu_s": 320},
                                                   {"rows": 3, "evaluated_tokens": 4_000, "process_cpu_s": 490}]})
    p = mod.pair(b, a, "", (bc, ac))
    assert p["questions"] == ["q1", "q2"]
    assert p["before"]["sums"]["prompt_tokens_computed"] == 6_000 and p["before"]["sums"]["cpu_s"] == 1_190
    assert p["after"]["sums"]["prompt_tokens_computed"] == 2_400 and p["after"]["sums"]["cpu_s"] == 300
    assert "| `x` | 2 | 595.0 → 150.0 (process) | 3.97× | 3,000 → 1,200 | 2.50× |" in mod.table({"x": p})
    p = mod.pair(b, a, "", (bc, None))  # the after side's route accounting: its CPU is not the process's
    assert p["before"]["sums"]["cpu_s"] is None and "| `x` | 2 | – | – | 3,000 → 1,000 |" in mod.table({"x": p})
    plain = {k: v for k, v in json.loads(ac.read_text()).items() if k != "rows"}
    ac.write_text(json.dumps(plain))
    with pytest.raises(SystemExit, match="3 rows"):
        mod.pair(b, a, "", (bc, ac))  # no timeline: a whole-run count of 3 questions is not the pair's 2
