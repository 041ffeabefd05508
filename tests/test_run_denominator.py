"""One denominator (issue 41 item 5; docs/metrics.md "Errored examples"): every score's mean is
over all answered-or-errored examples it applies to, an errored one scoring the worst value,
the same in metrics.json, in each row's stored values (what ``tables`` resamples) and in
``kgreason.score``; the retrieved-set size beside answer coverage (item 6)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import compose_cfg

from kgreason.metrics import METRICS
from kgreason.metrics.qa import normalize_answer
from kgreason.runner.run import run, summarise


def _flaky(monkeypatch, module, cls: str, every: str = "3"):
    """Make ``cls.answer`` raise on the examples whose id ends with ``every``."""
    orig = getattr(module, cls).answer

    def answer(self, ex):
        if ex.id.endswith(every):
            raise RuntimeError("boom")
        return orig(self, ex)

    monkeypatch.setattr(getattr(module, cls), "answer", answer)


def _rows(d: Path) -> list[dict]:
    return [json.loads(x) for x in (d / "predictions.jsonl").read_text().splitlines()]


def test_an_errored_example_counts_in_every_score_and_answer_coverage_too(tmp_path, monkeypatch):
    from kgreason.reasoners import retrieval_only
    from kgreason.score import read_pairs, score

    _flaky(monkeypatch, retrieval_only, "RetrievalOnly")
    names = ["hits_at_1", "answer_coverage", "answer_set_f1", "em", "musique_f1", "search_space"]
    res = run(compose_cfg(["tracking=none", "reports.hop_distribution=false", "dataset.limit=40",
                           "fail_on_error_rate=false", f"dataset.metrics=[{','.join(names)}]"], tmp_path), tmp_path)
    m, rows = res.metrics, _rows(tmp_path)
    bad = [r for r in rows if r["error"]]
    good = [r for r in rows if not r["error"]]
    assert 0 < len(bad) < len(rows) and m["run/errors"] == len(bad)
    for r in bad:  # the worst value, stored in the row (tables resamples these)
        assert r["metrics"] == {"hits_at_1": 0.0, "answer_coverage": 0.0, "answer_set_f1": 0.0, "em": 0.0,
                                "musique_f1": 0.0, "search_space": None}, r["metrics"]
    for name in names[:-1]:  # every score: the mean over all 40 rows
        vals = [r["metrics"][name] for r in rows]
        assert None not in vals and m[f"metric/{name}"] == pytest.approx(sum(vals) / len(rows)), name
    assert m["metric/answer_coverage"] < sum(r["metrics"]["answer_coverage"] for r in good) / len(good)
    # a count of what the method looked at is over the answered rows
    assert m["metric/search_space"] == pytest.approx(sum(r["extra"]["search_space"] for r in good) / len(good))
    # the retrieved set answer_coverage is measured over: its mean size, beside it
    sizes = [len({normalize_answer(x) for x in r["extra"]["retrieved"]}) for r in good]
    assert m["retrieval/retrieved_size"] == pytest.approx(sum(sizes) / len(sizes)) and m["retrieval/retrieved_size"] > 1
    assert "retrieval/retrieved_size_n_paths" not in m  # retrieval_only reports no N-path set
    # kgreason.score re-computes the same numbers from the file
    assert {f"metric/{k}": v for k, v in score(read_pairs(tmp_path), names).items()} == \
        {k: v for k, v in m.items() if k.startswith("metric/")}


def _row(metrics, error=None, extra=None, judge=None):
    r = {"id": "x", "metrics": metrics, "usage": {}, "extra": extra or {}, "error": error}
    if judge is not None:
        r["judge"] = judge
    return r


def test_a_score_the_method_never_reports_stays_null_when_examples_error():
    """io reports no retrieved set: its errored rows do not make answer coverage 0.0."""
    ms = [METRICS["hits_at_1"], METRICS["answer_coverage"], METRICS["dx_round2_f1"]]
    rows = [_row({"hits_at_1": 1.0, "answer_coverage": None, "dx_round2_f1": None}),
            _row({"hits_at_1": 0.0, "answer_coverage": 0.0, "dx_round2_f1": 0.0}, error="LLMError: down")]
    m = summarise(rows, ms, 2)
    assert m["metric/hits_at_1"] == 0.5
    assert m["metric/answer_coverage"] is None and "metric_notes/answer_coverage" in m
    assert m["metric/dx_round2_f1"] is None
    # a method that reports it: the errored row counts, as 0
    rows[0]["metrics"]["answer_coverage"] = 1.0
    assert summarise(rows, ms, 2)["metric/answer_coverage"] == 0.5
    # every example errored: the gold-side scores are 0, what the method reports cannot be told
    m = summarise(rows[1:], ms, 1)
    assert m["metric/hits_at_1"] == 0.0 and m["metric/answer_coverage"] is None
    assert "all 1 examples errored" in m["metric_notes/answer_coverage"]


def test_an_example_without_gold_is_not_applicable_whether_or_not_it_errored():
    from kgreason.metrics import error_value
    from kgreason.types import Example

    no_gold = Example(id="q", question="?", answers=(), diagnoses=())
    assert error_value(METRICS["answer_set_f1"], no_gold) is None  # None: no gold answer
    assert error_value(METRICS["dx_f1"], no_gold) is None
    assert error_value(METRICS["hits_at_1"], no_gold) == 0.0
    assert error_value(METRICS["search_space"], Example(id="q", question="?", answers=("a",))) is None


def test_errored_rows_of_a_diagnosis_run_score_zero_and_rounds_stay_not_applicable(tmp_path, monkeypatch):
    from kgreason.reasoners import kg_dx

    _flaky(monkeypatch, kg_dx, "KGDx", every="1")
    res = run(compose_cfg(["tracking=none", "reports.hop_distribution=false", "reasoner=kg_dx",
                           "dataset=embedded_clinical", "dataset.limit=12", "fail_on_error_rate=false",
                           "dataset.metrics=[dx_f1,dx_round1_f1]"], tmp_path), tmp_path)
    rows, m = _rows(tmp_path), res.metrics
    assert m["run/errors"] > 0
    assert m["metric/dx_f1"] == pytest.approx(sum(r["metrics"]["dx_f1"] for r in rows) / len(rows))
    assert all(r["metrics"]["dx_f1"] == 0.0 for r in rows if r["error"])
    assert m["metric/dx_round1_f1"] is None  # kg_dx returns no rounds


def _judged(accurate: float, stig: int) -> dict:
    s = {"accurate": accurate, "succinct": accurate, "synthesized": None, "abstraction_needed": 0,
         "stigmatizing": stig, "stigmatizing_record": 0}
    return {"scores": s, "per_round": {"round1": dict(s)}, "average_of": ["accurate", "succinct", "synthesized"]}


def test_judge_means_count_an_errored_example_at_each_rating_scale_bottom():
    rows = [_row({}, judge=_judged(5.0, 0)), _row({}, judge=_judged(3.0, 1)),
            _row({}, error="RuntimeError: boom"),
            _row({}, judge={"error": "LLMError: judge down"})]  # a failed measurement: left out
    m = summarise(rows, [], 4)
    assert m["judge/accurate"] == pytest.approx((5 + 3 + 1) / 3)
    assert m["judge/round1/succinct"] == pytest.approx((5 + 3 + 1) / 3)
    assert m["judge/pdsqi_average"] == pytest.approx((5 + 3 + 1) / 3)  # synthesized NA on the judged rows
    assert m["judge/stigmatizing"] == 0.5 and m["judge/abstraction_needed"] == 0.0  # 0/1 items: judged rows only
    assert m["judge/errors"] == 1 and m["run/errors"] == 1


def test_empty_retrieval_rate_status_and_sizes_from_the_rows():
    rows = [_row({}, extra={"retrieval_empty": True, "retrieved": []}),
            _row({}, extra={"retrieval_empty": False, "retrieved": ["A", "a", "B"], "retrieved_n_paths": ["A", "B", "C"]}),
            _row({}, error="RuntimeError: boom")]
    m = summarise(rows, [], 4)
    assert m["retrieval/empty_rate"] == 0.5  # over the rows that carry the flag
    assert m["retrieval/retrieved_size"] == 1.0  # (0 + |{a, b}|) / 2
    assert m["retrieval/retrieved_size_n_paths"] == 3.0
    assert m["run/status"] == "partial" and summarise(rows, [], 3)["run/status"] == "complete"
    assert "retrieval/empty_rate" not in summarise(rows[2:], [], 1)
