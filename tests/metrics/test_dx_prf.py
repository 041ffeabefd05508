"""The one diagnosis precision / recall / F1 (LogosKG App. A.2, Eq. 11-12): a golden table of
hand-computed cases, and the per-round metrics that score ``Prediction.rounds`` with it.

Rule pinned here (docs/metrics.md, kgreason/metrics/clinical.py): both sides become *sets* of
normalised strings (lower-case, ASCII punctuation deleted, whitespace collapsed, one leading
article a/an/the dropped); |pred ∩ gold| is the size of the set intersection. Empty prediction
set → P = R = F1 = 0; empty gold set → not applicable (None). No synonym or KG-alias matching.
"""

from __future__ import annotations

import pytest

from kgreason.metrics import METRICS
from kgreason.metrics.clinical import dx_prf
from kgreason.types import Example, Prediction

# (predicted, gold, expected (P, R, F1) or None, why)
GOLDEN = [
    (["Pneumonia.", "the flu"], ["pneumonia", "Flu"], (1.0, 1.0, 1.0),
     "case, a trailing full stop and the article 'the' do not change the entity (issue 15 case)"),
    (["A", "b", "C", "d"], ["a", "c", "E"], (2 / 4, 2 / 3, 4 / 7),
     "2 of 4 predictions are gold, 2 of 3 gold found; F1 = 2(1/2)(2/3)/(1/2+2/3) = 4/7"),
    (["flu", "Flu", "cold"], ["flu"], (1 / 2, 1.0, 2 / 3),
     "'flu' and 'Flu' are one entity: the prediction set is {flu, cold}"),
    (["Flu", "cold", "asthma"], ["flu", "Pneumonia"], (1 / 3, 1 / 2, 2 / 5),
     "1 hit; P = 1/3, R = 1/2, F1 = 2(1/3)(1/2)/(1/3+1/2) = 2/5"),
    ([], ["asthma"], (0.0, 0.0, 0.0), "empty prediction: P = 0 by convention, R = 0"),
    (["...", "?!"], ["asthma"], (0.0, 0.0, 0.0), "predictions that normalise to nothing are dropped"),
    (["Hepatitis A", "an Influenza"], ["hepatitis", "Influenza"], (1 / 2, 1 / 2, 1 / 2),
     "only a LEADING article goes: 'Hepatitis A' stays distinct from 'Hepatitis'"),
    (["A"], ["a"], (1.0, 1.0, 1.0), "a lone article is a word, not a leading article"),
    (["Guillain-Barré syndrome"], ["Guillain Barré syndrome"], (0.0, 0.0, 0.0),
     "a hyphen is deleted, not turned into a space ('guillainbarré' vs 'guillain barré')"),
    (["asthma"], [], None, "no gold diagnosis: not applicable, left out of the mean"),
    (["x"], ["y"], (0.0, 0.0, 0.0), "no overlap"),
    (["URTI"], ["Upper respiratory tract infection"], (0.0, 0.0, 0.0),
     "no synonym / KG-alias matching: an abbreviation is a different string"),
    (["Crohn\u2019s disease"], ["Crohn's disease"], (0.0, 0.0, 0.0),
     "only ASCII punctuation is dropped (SQuAD rule): a typographic apostrophe stays"),
    (["Acute pulmonary edema", "Pulmonary embolism"], ["pulmonary  embolism"], (1 / 2, 1.0, 2 / 3),
     "whitespace runs collapse"),
]


@pytest.mark.parametrize("pred,gold,expected,why", GOLDEN, ids=[g[3][:40] for g in GOLDEN])
def test_dx_prf_golden_table(pred, gold, expected, why):
    got = dx_prf(pred, gold)
    if expected is None:
        assert got is None, why
    else:
        assert got == pytest.approx(expected), why


def test_metric_objects_use_the_same_function():
    ex = Example(id="x", question="note", diagnoses=("pneumonia", "Flu"))
    p = Prediction("x", ("Pneumonia.", "the flu"))
    assert [METRICS[n].per_example(p, ex) for n in ("dx_precision", "dx_recall", "dx_f1")] == [1.0, 1.0, 1.0]


def test_per_round_metrics_score_the_prediction_rounds():
    ex = Example(id="x", question="note", diagnoses=("a", "c", "E"))
    p = Prediction("x", ("a",), rounds={"baseline": ("A", "b", "C", "d"), "round1": ("a", "c"), "round2": ()})
    got = {n: METRICS[n].per_example(p, ex) for n in METRICS if n.startswith("dx_") and "_round" in n
           or n.startswith("dx_baseline")}
    assert got["dx_baseline_precision"] == pytest.approx(0.5)
    assert got["dx_baseline_recall"] == pytest.approx(2 / 3)
    assert got["dx_baseline_f1"] == pytest.approx(4 / 7)
    assert (got["dx_round1_precision"], got["dx_round1_recall"]) == pytest.approx((1.0, 2 / 3))
    assert (got["dx_round2_precision"], got["dx_round2_f1"]) == (0.0, 0.0)  # an empty round scores 0
    # a round the prediction does not carry is not applicable (rounds=1 runs, kg_dx, errors)
    q = Prediction("x", ("a",), rounds={"baseline": ("a",)})
    assert METRICS["dx_round2_f1"].per_example(q, ex) is None
    assert METRICS["dx_round1_f1"].per_example(Prediction("x", ("a",)), ex) is None


def test_score_cli_reads_rounds_from_prediction_rows():
    from kgreason.score import ScoreInputError, parse_line

    row = {"id": "x", "prediction": "a", "answers": ["a", "c", "E"], "diagnoses": ["a", "c", "E"],
           "rounds": {"baseline": ["A", "b", "C", "d"], "round1": ["a"]}}
    pred, ex = parse_line(row, "p.jsonl:1")
    assert pred.rounds == {"baseline": ("A", "b", "C", "d"), "round1": ("a",)}
    assert METRICS["dx_baseline_f1"].per_example(pred, ex) == pytest.approx(4 / 7)
    with pytest.raises(ScoreInputError, match=r"p.jsonl:2: field 'rounds.round1' must be a string or a list"):
        parse_line({**row, "rounds": {"round1": [1]}}, "p.jsonl:2")
